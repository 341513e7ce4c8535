"""``slabscope bench KIND``: benchmarks that print figures. Each kind lives in ``app.commands.bench_<kind>``
and defines ``add_arguments(parser)`` and ``main(args) -> int``."""

from __future__ import annotations

import importlib
import json
import sys

from app.commands.errors import RunError, UsageError

BENCH_KINDS = {
    "growth": "successive pool-extending prefills per storage design: copies, appends, footprint",
    "decode": "paged decode: gather+SDPA vs fused kernel vs contiguous SDPA over a batch x context grid",
    "probes": "the probes' own cost on workload throughput (on vs off)",
    "snapshot": "cost of a pool snapshot on a large pool",
    "throughput": "backends and mlx-lm's BatchGenerator on the same prompts: warm and fresh-process, median and range",
    "model": "load time, prefill and decode speed of one model with stock mlx-lm caches",
    "host": "host time per prefill chunk and decode step (graph build, dispatch, wait) and its MLX primitives",
    "export": "slabscope export of a synthetic one-hour 10 Hz session: fresh-process time and file size per format",
    "shrink": "shrink policies: footprint after a burst (fresh processes) and decode throughput against off",
    "blas": "MLX's CPU fp32 matmul, bundled reference BLAS vs OpenBLAS: fresh processes, speed-up median and range",
    "follow": "following a growing recording (GrowingSession.refresh) against re-opening the whole file",
    "bookkeeping": "host time of the slab pool's per-step decode bookkeeping, without a model",
    "folder": "compare and report over a folder of many recordings: fresh processes, wall time and peak RSS",
}


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help=f"benchmarks that print figures ({', '.join(BENCH_KINDS)})")
    kinds = p.add_subparsers(dest="bench_kind", metavar="KIND")
    for kind, help_text in BENCH_KINDS.items():
        try:
            mod = importlib.import_module(f"app.commands.bench_{kind}")
        except ModuleNotFoundError as exc:
            if exc.name != f"app.commands.bench_{kind}":
                raise
            continue
        kp = kinds.add_parser(kind, help=help_text)
        mod.add_arguments(kp)
        kp.set_defaults(func=mod.main)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def print_figures(args, measure, format_report) -> int:
    """Run ``measure(progress)`` (progress lines go to stderr) and print its figures: one JSON object with
    ``--json``, else ``format_report``'s text. A ValueError from it is a usage error (exit 2), a RuntimeError a
    failed run (exit 1), each one line."""
    try:
        result = measure(lambda text: print(text, file=sys.stderr, flush=True))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except RuntimeError as exc:
        raise RunError(str(exc)) from None
    print(json.dumps(result) if args.json else format_report(result))
    return 0
