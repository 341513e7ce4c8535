"""``slabscope bench throughput``: the backends and mlx-lm's BatchGenerator on the same prompts, warm (one
process, interleaved rounds after a warm-up round) and fresh (a new process per engine), median and range per
engine, and a verdict that names no winner when ranges overlap (``app/bench/throughput.py``).

    slabscope bench throughput --set n=8 --set prompt_tokens=4096 --set gen_tokens=32 \\
        --model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu          # the H200 footprint workload
    slabscope bench throughput --model smollm2-135m --set n=2 --set prompt_tokens=64 --set gen_tokens=8   # CPU

An engine name may carry its own run parameters, so variants run interleaved as engines of one bench:
``slab:128`` (a pool engine at 128 rows per slab), ``slab@8G`` or ``dense@off`` (a slabscope engine under its own
prefill in-flight allowance), ``slab:128@8G`` (both): ``--engines slab,slab@8G,dense,dense@8G``.
"""

from __future__ import annotations

import sys

from app.commands.arg_types import (add_mlx_cache_arguments, add_open_blocks_argument, add_shrink_arguments,
                                    non_negative_int, positive_int)
from app.commands.bench_workload import add_workload_arguments, workload_fields


def add_arguments(p) -> None:
    from app.bench.throughput import DEFAULT_ENGINES, ENGINES

    add_workload_arguments(p, ENGINES, DEFAULT_ENGINES)
    p.add_argument("--rounds", type=positive_int, default=5, help="interleaved warm rounds after the warm-up (>= 5 "
                   "for a verdict worth reading; default 5)")
    p.add_argument("--fresh-rounds", type=int, default=1, help="fresh-process runs per engine (0: none; default 1)")
    add_mlx_cache_arguments(p, who="every engine alike (the trim: slabscope's engines)")
    add_shrink_arguments(p, who="slabscope's pool engines (slab, monolithic)")
    add_open_blocks_argument(p)
    p.add_argument("--prefill-batch-tokens", type=non_negative_int, default=None,
                   help="slabscope engines: tokens a prefill step may batch over sequences at the same chunk "
                        "(default: 8192 on a GPU, 0 on a CPU: one sequence per step)")
    p.add_argument("--slab-blocks", type=positive_int, default=None,
                   help="rows per slab of the pool engines (default: the scenario's, else 32; an engine named "
                        "slab:ROWS runs at its own, e.g. --engines slab,slab:128,dense; NAME@BYTES its own "
                        "--prefill-inflight, e.g. slab@8G); the prefill chunk follows "
                        "it only under SLABSCOPE_PREFILL_CHUNK_POLICY=slab, for every engine alike")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object (progress still on stderr)")


def main(args) -> int:
    from app.bench.throughput import BenchConfig, format_report, run_bench, to_json

    try:
        config = BenchConfig(**workload_fields(args), rounds=args.rounds, fresh_rounds=args.fresh_rounds,
                             seed=args.seed, cache_limit=args.cache_limit, prefill_trim=args.prefill_trim,
                             prefill_inflight=args.prefill_inflight,
                             shrink=args.shrink, shrink_budget=args.shrink_budget, open_blocks=args.open_blocks,
                             prefill_batch_tokens=args.prefill_batch_tokens, slab_blocks=args.slab_blocks)
    except ValueError as exc:  # ScenarioError too
        print(f"slabscope bench throughput: {exc}", file=sys.stderr)
        return 2
    from app.bench.throughput import EngineFailed
    from app.commands.errors import RunError

    try:
        result = run_bench(config, progress=lambda text: print(text, file=sys.stderr, flush=True))
    except EngineFailed as exc:  # an out-of-memory is an engine's result; anything else stops the bench, one line
        raise RunError(str(exc)) from None
    print(to_json(result) if args.json else format_report(result))
    return 0
