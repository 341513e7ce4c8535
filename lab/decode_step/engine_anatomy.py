"""Where the engine's decode step goes, per backend, in the real workload (issue 13's item 5: slab against dense).

``step_anatomy.py`` times a decode step on state written directly; this times the engine's own steps inside
``run_workload`` (scheduler, pool bookkeeping, token slots, fused decisions, the model), backends interleaved over
``--rounds`` warm rounds in one process after a warm-up round each. Per decode step (the first step of each run
left out): ``build`` is the host time of ``Engine._dispatch`` outside ``mx.async_eval`` (Python building the
graph), ``encode`` the host time inside ``mx.async_eval`` (MLX encoding the step's kernels), ``step`` the step's
wall time from its ``Step`` event. With ``--profile N`` the last round of each backend runs under cProfile (decode
dispatches only) and the N functions with the most own time print with microseconds per step; the profiler slows
that round, so it is left out of the figures. On the GPU (the decode-heavy case):

    PYTHONPATH=. python3 app/bench/device/engine_anatomy.py --set n=16 --set prompt_tokens=2048 \\
        --set gen_tokens=256 --rounds 5 --profile 25

On a CPU, ``--emulate-cuda`` runs the CUDA fused route's host side (kernels replaced by zeros: only ``build``
means what it means on a GPU):

    PYTHONPATH=. python3 app/bench/device/engine_anatomy.py --emulate-cuda --device cpu --dtype float32 \\
        --model synthetic:tiny-qwen3-28l --set n=16 --set prompt_tokens=1024 --set gen_tokens=48 --slab-blocks 8 \\
        --prefill-chunk 512 --rounds 3 --profile 25
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time

from app.bench.device.first_step import add_burst_arguments, burst_overrides


class DecodeClock:
    """Times ``Engine._dispatch`` (decode steps) and the ``mx.async_eval`` calls inside it, by patching both for
    the life of the process; optionally runs a cProfile over the dispatches while ``profiler`` is set."""

    def __init__(self, engine_cls, mx):
        self.dispatch_ms: list[float] = []
        self.encode_ms: list[float] = []
        self.profiler: cProfile.Profile | None = None
        self._inside = False
        dispatch, async_eval = engine_cls._dispatch, mx.async_eval

        def timed_eval(*arrays):
            if not self._inside:
                return async_eval(*arrays)
            t0 = time.perf_counter()
            try:
                return async_eval(*arrays)
            finally:
                self.encode_ms.append((time.perf_counter() - t0) * 1e3)

        def timed_dispatch(engine, plan, starts, inputs):
            self._inside = True
            if self.profiler is not None:
                self.profiler.enable()
            t0 = time.perf_counter()
            try:
                return dispatch(engine, plan, starts, inputs)
            finally:
                self.dispatch_ms.append((time.perf_counter() - t0) * 1e3)
                if self.profiler is not None:
                    self.profiler.disable()
                self._inside = False

        mx.async_eval = timed_eval  # engine.py calls it as mx.async_eval: one patch serves every caller
        engine_cls._dispatch = timed_dispatch

    def reset(self) -> None:
        self.dispatch_ms.clear()
        self.encode_ms.clear()

    def figures(self) -> dict:
        """Median build and encode ms per decode dispatch, the first dispatch of the run left out."""
        builds = [d - e for d, e in zip(self.dispatch_ms, self.encode_ms)][1:]
        encodes = self.encode_ms[1:]
        return {"build_ms": statistics.median(builds) if builds else None,
                "encode_ms": statistics.median(encodes) if encodes else None}


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


def spread(values: list[float], spec: str = ".2f") -> str:
    """``median [min-max]`` of ``values``, each formatted by ``spec`` ("-" for none)."""
    if not values:
        return "-"
    return f"{statistics.median(values):{spec}} [{min(values):{spec}}-{max(values):{spec}}]"


def json_row(row: dict) -> str:
    """One printed round: floats to three decimals."""
    return json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})


def add_round_arguments(parser) -> None:
    """The warm-round diagnostics' flags (this script, ``warm_open_blocks.py``): the run (``add_burst_arguments``),
    ``--rounds``, the pool's ``--slab-blocks`` and ``--prefill-chunk``, and ``--emulate-cuda``."""
    add_burst_arguments(parser)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slab-blocks", type=int, default=None)
    parser.add_argument("--prefill-chunk", type=int, default=None)
    parser.add_argument("--emulate-cuda", action="store_true")


def load_for_rounds(args):
    """The model of ``args``, with the CUDA route's host side installed under ``--emulate-cuda``
    (app/bench/host_emulation.py)."""
    from app.models import load_model  # its loader runs the bootstrap (OpenBLAS, MLX's settings) before mlx loads

    loaded = load_model(args.model, dtype=args.dtype, device=args.device, seed=0)
    if args.emulate_cuda:
        from app.bench.host_emulation import install

        install(args.dtype, loaded.head_dim)
    return loaded


def run_round(loaded, args, **spec_fields) -> tuple[dict, list[float]]:
    """One distinct_burst run of ``args``' workload on ``loaded`` (``spec_fields``: the backend, open blocks...):
    (its summary, its decode steps' wall times in ms)."""
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    spec = RunSpec(scenario="distinct_burst", model=loaded.name, dtype=args.dtype, device=args.device,
                   overrides=burst_overrides(args.set), slab_blocks=args.slab_blocks,
                   prefill_chunk=args.prefill_chunk, **spec_fields)
    steps: list[float] = []

    def emit(event):
        if type(event).__name__ == "Step" and event.type == "decode":
            steps.append(event.wall_s * 1e3)

    return run_workload(spec, emit, loaded=loaded), steps


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
