"""Where the first decode step of a fresh process spends its time (diagnostic; figures in docs/measurements-log.md).

Runs the burst once in this process (``run_workload``, as ``slabscope record`` does) with the engine's decode
dispatch and completion timed apart: ``build`` (graph built and handed to ``mx.async_eval``), ``wait`` (until the
step's tokens are read). Prints the first ``--steps`` decode steps and the median of the rest, with the settings
that may explain a slow first step: the prefill trim (``--prefill-trim off`` keeps MLX's cache) and the decode
rehearsal ($SLABSCOPE_REHEARSAL=0 skips it). One process per setting: run it once per configuration.

    python3 -m lab.first_step.first_step --backend slab [--prefill-trim off] [--open-blocks low]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from app.commands.arg_types import add_open_blocks_argument
from lab.engine_rounds import add_burst_arguments, burst_overrides


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_burst_arguments(parser)
    parser.add_argument("--prefill-trim", default="0.05")
    parser.add_argument("--steps", type=int, default=3)
    add_open_blocks_argument(parser)
    args = parser.parse_args()
    t_start = time.perf_counter()
    from app.workloads.engine import Engine
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    timings: list[dict] = []
    dispatch, complete = Engine._dispatch, Engine._complete
    run_started: list[bool] = []  # set at the run's MetaUpdate: the load-time rehearsal's own steps are not timed

    def timed_dispatch(self, plan, starts, inputs):
        t0 = time.perf_counter()
        out = dispatch(self, plan, starts, inputs)
        if run_started:
            timings.append({"build_ms": (time.perf_counter() - t0) * 1e3})
        return out

    def timed_complete(self, step, t0):
        t1 = time.perf_counter()
        result = complete(self, step, t0)
        if run_started:
            timings[-1 if self._inflight is None else -2]["complete_ms"] = (time.perf_counter() - t1) * 1e3
        return result

    Engine._dispatch, Engine._complete = timed_dispatch, timed_complete
    spec = RunSpec(scenario="distinct_burst", backend=args.backend, model=args.model, dtype=args.dtype,
                   device=args.device, overrides=burst_overrides(args.set),
                   prefill_trim=None if args.prefill_trim == "off" else float(args.prefill_trim),
                   open_blocks=args.open_blocks)
    steps: list[float] = []
    meta: dict = {}

    def emit(event):
        name = type(event).__name__
        if name == "Step" and event.type == "decode":
            steps.append(event.wall_s * 1e3)
        elif name == "MetaUpdate":
            meta.update(event.meta)
            run_started.append(True)

    summary = run_workload(spec, emit)
    rest = steps[args.steps:]
    print(json.dumps({"backend": args.backend, "prefill_trim": args.prefill_trim, "open_blocks": args.open_blocks,
                      "rehearsal": meta.get("rehearsal"), "mlx_env": meta.get("mlx_env"),
                      "process_s": time.perf_counter() - t_start,
                      "tok_s": summary.get("tok_s"), "first_steps_ms": [round(s, 2) for s in steps[:args.steps]],
                      "median_rest_ms": round(statistics.median(rest), 2) if rest else None,
                      "first_timings": [{k: round(v, 2) for k, v in t.items()} for t in timings[:args.steps]],
                      "median_build_ms": round(statistics.median(t["build_ms"] for t in timings[args.steps:]), 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
