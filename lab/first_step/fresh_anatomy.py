"""Where a fresh process's run time goes, step kind by step kind, against the same run again in the same process
(diagnostic: fresh-process slab tok/s against dense; figures in docs/measurements-log.md).

Loads the model once, then runs the burst ``--runs`` times in this process (``run_workload``, as ``slabscope
record`` does; run 1 is the fresh-process run a user sees first, later runs are warm) and prints one JSON line per
run: the prefill and decode steps' summed wall time, their first three and their median, the run's tok/s over busy
time (the compare table's figure) and the load-time rehearsal's report (``app/workloads/rehearsal.py``). The
difference between run 1 and run 2 of one backend is what that backend pays for first uses.

    python3 -m lab.first_step.fresh_anatomy --backend slab --runs 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from lab.engine_rounds import add_burst_arguments, burst_overrides


def step_summary(walls_ms: list[float]) -> dict:
    """Sum, count, first three and median of one step kind's wall times (ms)."""
    return {"n": len(walls_ms), "sum_ms": round(sum(walls_ms), 1), "first_ms": [round(w, 1) for w in walls_ms[:3]],
            "median_ms": round(statistics.median(walls_ms), 2) if walls_ms else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_burst_arguments(parser)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    t_start = time.perf_counter()
    from app.models import load_model
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    spec = RunSpec(scenario="distinct_burst", backend=args.backend, model=args.model, dtype=args.dtype,
                   device=args.device, overrides=burst_overrides(args.set))
    loaded = load_model(spec.model, dtype=spec.dtype, device=spec.device, seed=spec.seed)
    load_s = time.perf_counter() - t_start
    for index in range(args.runs):
        walls: dict[str, list[float]] = {"prefill": [], "decode": []}
        meta: dict = {}

        def emit(event):
            name = type(event).__name__
            if name == "Step":
                walls.setdefault(event.type, []).append(event.wall_s * 1e3)
            elif name == "MetaUpdate":
                meta.update(event.meta)

        t0 = time.perf_counter()
        summary = run_workload(spec, emit, loaded=loaded)
        print(json.dumps({"backend": args.backend, "run": index + 1, "load_s": round(load_s, 2),
                          "run_call_s": round(time.perf_counter() - t0, 3), "wall_s": summary.get("wall_s"),
                          "tok_s": summary.get("tok_s"), "rehearsal": meta.get("rehearsal"),
                          "mlx_env": meta.get("mlx_env"),
                          "prefill": step_summary(walls["prefill"]), "decode": step_summary(walls["decode"])}),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
