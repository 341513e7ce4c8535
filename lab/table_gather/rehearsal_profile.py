"""Where a slab run's load-time rehearsal spends its time: builds the session of the issue's ragged churn command
(the rehearsal runs inside ``build_session``) under cProfile and prints the top functions by own time and by
cumulative time, with the rehearsal's seconds.

    PYTHONPATH=. python3 -m lab.table_gather.rehearsal_profile --slab-blocks 8 [--backend slab] [--small]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slab-blocks", type=int, default=8)
    parser.add_argument("--backend", default="slab")
    parser.add_argument("--small", action="store_true", help="tiny model on the CPU, rehearsal forced")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    from app.workloads.scenarios import load_scenario
    from app.workloads.session import build_session
    from app.workloads.spec import RunSpec

    if args.small:
        import app.workloads.rehearsal as rehearsal

        rehearsal.runs_on_gpu = lambda device: True
        overrides = {"n": 4, "concurrency": 4, "prompt_min": 64, "prompt_max": 600, "gen_min": 4, "gen_max": 4}
        spec = RunSpec(scenario="churn", backend=args.backend, model="synthetic:tiny-qwen3-28l", device="cpu",
                       dtype="float32", slab_blocks=args.slab_blocks, overrides=overrides)
    else:
        overrides = {"n": 16, "concurrency": 16, "prompt_min": 1024, "prompt_max": 12288, "gen_min": 128,
                     "gen_max": 128}
        spec = RunSpec(scenario="churn", backend=args.backend, model="synthetic:qwen3-0.6b", device="gpu",
                       dtype="bfloat16", slab_blocks=args.slab_blocks, overrides=overrides)
    scenario = load_scenario(spec.scenario, overrides)
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    session = build_session(spec, scenario)
    profiler.disable()
    print(f"build_session {time.perf_counter() - t0:.2f} s; rehearsal "
          f"{getattr(session, 'rehearsal', None) and session.rehearsal.seconds}")
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    session.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
