"""What the engine diagnostics share (``lab/decode_step``, ``lab/first_step``, ``lab/open_blocks``): the run they
time (distinct_burst on a model, ``--set`` overrides, the burst by default), warm rounds of it in one process, a
clock on the engine's decode dispatches, and the median [range] they print. Imports mlx and the workloads only
inside functions, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import statistics
import time

BURST = ["n=8", "prompt_tokens=4096", "gen_tokens=32"]  # the burst: 8 distinct 4096-token prompts, 32 tokens each


def add_burst_arguments(parser) -> None:
    """The run these diagnostics time: backend, model, dtype, device and scenario overrides (default: the burst)."""
    parser.add_argument("--backend", default="slab")
    parser.add_argument("--model", default="synthetic:qwen3-0.6b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="gpu")
    parser.add_argument("--set", action="append", default=None, type=override_item, metavar="KEY=INT",
                        help="scenario overrides (default: the burst's)")


def override_item(text: str) -> tuple[str, int]:
    """One ``--set KEY=INT`` item; a usage error (argparse's one line) for anything else."""
    key, sep, value = text.partition("=")
    if not sep or not key or not value.lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"expected KEY=INT, got {text!r}")
    return key, int(value)


def burst_overrides(items: list[tuple[str, int]] | None) -> dict:
    """The ``--set`` items as distinct_burst's overrides (the burst's when none)."""
    return dict(items) if items else dict(override_item(item) for item in BURST)


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


def spread(values: list[float], spec: str = ".2f") -> str:
    """``median [min-max]`` of ``values``, each formatted by ``spec`` ("-" for none)."""
    if not values:
        return "-"
    return f"{statistics.median(values):{spec}} [{min(values):{spec}}-{max(values):{spec}}]"


def json_row(row: dict) -> str:
    """One printed round: floats to three decimals."""
    return json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})


def add_round_arguments(parser) -> None:
    """The warm-round diagnostics' flags (``decode_step/engine_anatomy.py``, ``open_blocks/warm_rounds.py``): the run
    (``add_burst_arguments``), ``--rounds``, the pool's ``--slab-blocks`` and ``--prefill-chunk``, and
    ``--emulate-cuda``."""
    add_burst_arguments(parser)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slab-blocks", type=int, default=None)
    parser.add_argument("--prefill-chunk", type=int, default=None)
    parser.add_argument("--prefill-batch-tokens", type=int, default=None)
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
                   prefill_chunk=args.prefill_chunk,
                   prefill_batch_tokens=getattr(args, "prefill_batch_tokens", None), **spec_fields)
    steps: list[float] = []

    def emit(event):
        if type(event).__name__ == "Step" and event.type == "decode":
            steps.append(event.wall_s * 1e3)

    return run_workload(spec, emit, loaded=loaded), steps
