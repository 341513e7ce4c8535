"""``slabscope bench KIND``: benchmarks that print figures. Each kind lives in ``app.commands.bench_<kind>``
and defines ``add_arguments(parser)`` and ``main(args) -> int``."""

from __future__ import annotations

import importlib

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
