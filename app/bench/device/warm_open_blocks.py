"""Warm rounds of the slab engine in one process, open blocks high against low (issue 13's open check, docs/gpu.md).

``bench throughput`` at 8abefb4 showed slab's warm decode step slower than at 0eb0f83 while its fresh-process records
did not. This runs the slab engine alone, ``--rounds`` times per policy in one process (the arms alternating which
goes first, after one warm-up round each), and prints per policy the median [range] over rounds of: the decode
step's graph build (``Engine._dispatch``: build + ``async_eval``), the first decode step's build, the decode step's
wall time and tok/s. On the GPU:

    PYTHONPATH=. python3 app/bench/device/warm_open_blocks.py --rounds 5

On a CPU, ``--emulate-cuda`` runs the CUDA fused route's host side (app/bench/host_emulation.py: kernels replaced by
zeros, so only the build columns mean what they mean on a GPU):

    PYTHONPATH=. python3 app/bench/device/warm_open_blocks.py --emulate-cuda --device cpu --dtype float32 \\
        --model synthetic:tiny-qwen3-28l --set n=8 --set prompt_tokens=1024 --set gen_tokens=24 --slab-blocks 8 \\
        --prefill-chunk 512 --rounds 12
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from app.bench.device.first_step import add_burst_arguments, burst_overrides

POLICIES = ("high", "low")


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_burst_arguments(parser)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slab-blocks", type=int, default=None)
    parser.add_argument("--prefill-chunk", type=int, default=None)
    parser.add_argument("--emulate-cuda", action="store_true")
    args = parser.parse_args()
    from app.models import load_model  # its loader runs the bootstrap (OpenBLAS, MLX's settings) before mlx loads

    loaded = load_model(args.model, dtype=args.dtype, device=args.device, seed=0)
    if args.emulate_cuda:
        from app.bench.host_emulation import install

        install(args.dtype, loaded.head_dim)
    from app.workloads.engine import Engine
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    builds: list[float] = []
    dispatch = Engine._dispatch

    def timed(self, plan, starts, inputs):
        t0 = time.perf_counter()
        out = dispatch(self, plan, starts, inputs)
        builds.append((time.perf_counter() - t0) * 1e3)
        return out

    Engine._dispatch = timed
    results: dict[str, list[dict]] = {policy: [] for policy in POLICIES}
    for round_index in range(args.rounds + 1):  # round 0 warms each arm up and is not counted
        order = POLICIES if round_index % 2 else POLICIES[::-1]
        for policy in order:
            builds.clear()
            steps: list[float] = []
            spec = RunSpec(scenario="distinct_burst", backend="slab", model=loaded.name, dtype=args.dtype,
                           device=args.device, overrides=burst_overrides(args.set), slab_blocks=args.slab_blocks,
                           prefill_chunk=args.prefill_chunk, open_blocks=policy)

            def emit(event, steps=steps):
                if type(event).__name__ == "Step" and event.type == "decode":
                    steps.append(event.wall_s * 1e3)

            summary = run_workload(spec, emit, loaded=loaded)
            row = {"round": round_index, "policy": policy, "tok_s": summary.get("tok_s"),
                   "first_build_ms": builds[0], "build_ms": statistics.median(builds[1:]),
                   "step_ms": statistics.median(steps), "first_step_ms": steps[0]}
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
            if round_index:
                results[policy].append(row)
    for policy, rows in results.items():
        cells = {key: _spread([r[key] for r in rows]) for key in
                 ("build_ms", "first_build_ms", "step_ms", "first_step_ms", "tok_s")}
        print(f"open blocks {policy}: " + ", ".join(f"{k} {v}" for k, v in cells.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
