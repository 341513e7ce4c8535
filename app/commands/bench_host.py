"""``slabscope bench host``: host time per prefill chunk and per decode step (graph build, dispatch, wait) and the
MLX primitives each step builds, per engine on the same schedule, engines interleaved (``app/bench/host_time.py``).

    slabscope bench host --model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu \\
        --set n=8 --set prompt_tokens=4096 --set gen_tokens=32           # the H200 burst
    slabscope bench host --model synthetic:tiny-qwen3-28l --set n=2 --set prompt_tokens=2048 --set gen_tokens=8
    slabscope bench host --emulate-cuda --slab-blocks 8 --model synthetic:tiny-qwen3-28l --dtype float32 \\
        --device cpu --set n=8 --set prompt_tokens=1024 --set gen_tokens=32 --engines slab,dense   # GPU route, CPU
"""

from __future__ import annotations

from app.commands.arg_types import add_open_blocks_argument, positive_int
from app.commands.bench import print_figures
from app.commands.bench_workload import add_workload_arguments, workload_fields


def add_arguments(p) -> None:
    from app.bench.host_time import DEFAULT_ENGINES, ENGINES

    add_workload_arguments(p, ENGINES, DEFAULT_ENGINES)
    p.add_argument("--prefill-chunk", type=positive_int, default=None, help="tokens per prefill chunk (default: "
                   "the scenario's)")
    p.add_argument("--slab-blocks", type=positive_int, default=None, help="rows per slab of the paged engines "
                   "(default: the scenario's)")
    p.add_argument("--emulate-cuda", action="store_true", help="run the CUDA fused route's host side on this "
                   "machine, kernels replaced by zeros (app/bench/host_emulation.py): build times only")
    add_open_blocks_argument(p)
    p.add_argument("--no-ops", action="store_true", help="skip counting each step's primitives")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object (progress still on stderr)")


def main(args) -> int:
    from app.bench.host_time import HostConfig, format_report, run_host_bench

    def measure(progress):  # a bad configuration (ScenarioError too) is a ValueError: a usage error
        config = HostConfig(**workload_fields(args), prefill_chunk=args.prefill_chunk, seed=args.seed,
                            count_ops=not args.no_ops, slab_blocks=args.slab_blocks, emulate_cuda=args.emulate_cuda,
                            open_blocks=args.open_blocks)
        return run_host_bench(config, progress)

    return print_figures(args, measure, format_report)
