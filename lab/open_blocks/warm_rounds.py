"""Warm rounds of the slab engine in one process, open blocks high against low (docs/measurements-log.md).

``bench throughput`` at 8abefb4 showed slab's warm decode step slower than at 0eb0f83 while its fresh-process records
did not. This runs the slab engine alone, ``--rounds`` times per policy in one process (the arms alternating which
goes first, after one warm-up round each), and prints per policy the median [range] over rounds of: the decode
step's graph build (``Engine._dispatch``: build + ``async_eval``), the first decode step's build, the decode step's
wall time and tok/s. On the GPU:

    python3 -m lab.open_blocks.warm_rounds --rounds 5

On a CPU, ``--emulate-cuda`` runs the CUDA fused route's host side (app/bench/host_emulation.py: kernels replaced by
zeros, so only the build columns mean what they mean on a GPU):

    python3 -m lab.open_blocks.warm_rounds --emulate-cuda --device cpu --dtype float32 \\
        --model synthetic:tiny-qwen3-28l --set n=8 --set prompt_tokens=1024 --set gen_tokens=24 --slab-blocks 8 \\
        --prefill-chunk 512 --rounds 12
"""

from __future__ import annotations

import argparse
import statistics

from lab.engine_rounds import DecodeClock, add_round_arguments, json_row, load_for_rounds, run_round, spread

POLICIES = ("high", "low")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_arguments(parser)
    args = parser.parse_args()
    loaded = load_for_rounds(args)
    import mlx.core as mx

    from app.workloads.engine import Engine

    clock = DecodeClock(Engine, mx)  # its dispatch times are this script's "build" (graph build + async_eval)
    results: dict[str, list[dict]] = {policy: [] for policy in POLICIES}
    for round_index in range(args.rounds + 1):  # round 0 warms each arm up and is not counted
        order = POLICIES if round_index % 2 else POLICIES[::-1]
        for policy in order:
            clock.reset()
            summary, steps = run_round(loaded, args, backend="slab", open_blocks=policy)
            builds = clock.dispatch_ms
            row = {"round": round_index, "policy": policy, "tok_s": summary.get("tok_s"),
                   "first_build_ms": builds[0], "build_ms": statistics.median(builds[1:]),
                   "step_ms": statistics.median(steps), "first_step_ms": steps[0]}
            print(json_row(row), flush=True)
            if round_index:
                results[policy].append(row)
    for policy, rows in results.items():
        cells = {key: spread([r[key] for r in rows]) for key in
                 ("build_ms", "first_build_ms", "step_ms", "first_step_ms", "tok_s")}
        print(f"open blocks {policy}: " + ", ".join(f"{k} {v}" for k, v in cells.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
