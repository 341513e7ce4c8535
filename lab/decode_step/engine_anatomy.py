"""Where the engine's decode step goes, per backend, in the real workload (slab against dense).

``step_anatomy.py`` (beside this) times a decode step on state written directly; this times the engine's own steps
inside ``run_workload`` (scheduler, pool bookkeeping, token slots, fused decisions, the model), backends interleaved
over ``--rounds`` warm rounds in one process after a warm-up round each. Per decode step (the first step of each run
left out): ``build`` is the host time of ``Engine._dispatch`` outside ``mx.async_eval`` (Python building the graph),
``encode`` the host time inside ``mx.async_eval`` (MLX encoding the step's kernels), ``step`` the step's wall time
from its ``Step`` event. With ``--profile N`` the last round of each backend runs under cProfile (decode dispatches
only) and the N functions with the most own time print with microseconds per step; the profiler slows that round, so
it is left out of the figures. On the GPU (the decode-heavy case):

    python3 -m lab.decode_step.engine_anatomy --set n=16 --set prompt_tokens=2048 \\
        --set gen_tokens=256 --rounds 5 --profile 25

On a CPU, ``--emulate-cuda`` runs the CUDA fused route's host side (kernels replaced by zeros: only ``build``
means what it means on a GPU):

    python3 -m lab.decode_step.engine_anatomy --emulate-cuda --device cpu --dtype float32 \\
        --model synthetic:tiny-qwen3-28l --set n=16 --set prompt_tokens=1024 --set gen_tokens=48 --slab-blocks 8 \\
        --prefill-chunk 512 --rounds 3 --profile 25
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics

from lab.engine_rounds import DecodeClock, add_round_arguments, json_row, load_for_rounds, run_round, spread


def top_functions(profiler: cProfile.Profile, steps: int, count: int) -> list[str]:
    """The ``count`` functions with the most own time, as 'us per step, calls per step, file:line(function)'."""
    stats = pstats.Stats(profiler).stats
    rows = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:count]
    out = []
    for (filename, line, name), (_, calls, own, cumulative, _) in rows:
        short = "/".join(filename.split("/")[-2:])
        out.append(f"{own / steps * 1e6:8.1f} us own {cumulative / steps * 1e6:8.1f} us cum "
                   f"{calls / steps:6.1f} calls  {short}:{line}({name})")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_arguments(parser)
    parser.add_argument("--backends", default="dense,slab")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions")
    args = parser.parse_args()
    loaded = load_for_rounds(args)
    import mlx.core as mx

    from app.workloads.engine import Engine

    clock = DecodeClock(Engine, mx)
    backends = args.backends.split(",")
    results: dict[str, list[dict]] = {backend: [] for backend in backends}
    profiled = args.profile > 0
    for round_index in range(args.rounds + 1 + profiled):  # round 0 warms up; a profiled round ends the series
        profile_round = profiled and round_index == args.rounds + 1
        shift = round_index % len(backends)
        for backend in backends[shift:] + backends[:shift]:
            clock.reset()
            clock.profiler = cProfile.Profile() if profile_round else None
            summary, steps = run_round(loaded, args, backend=backend)
            row = {"round": round_index, "backend": backend, "tok_s": summary.get("tok_s"), **clock.figures(),
                   "step_ms": statistics.median(steps[1:]) if len(steps) > 1 else None}
            print(json_row(row), flush=True)
            if profile_round:
                print(f"profile of {backend}'s decode dispatches ({len(steps)} steps; own/cumulative time per step):")
                print("\n".join(top_functions(clock.profiler, max(1, len(steps)), args.profile)), flush=True)
            elif round_index:
                results[backend].append(row)
    for backend, rows in results.items():
        cells = {key: spread([r[key] for r in rows if r[key] is not None]) for key in
                 ("build_ms", "encode_ms", "step_ms", "tok_s")}
        print(f"{backend}: " + ", ".join(f"{k} {v}" for k, v in cells.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
