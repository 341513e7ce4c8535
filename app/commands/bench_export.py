"""``slabscope bench export``: what ``slabscope export`` costs on a long session, as a user runs it.

Writes a synthetic session (``probes.synthetic.write_synthetic_session``: ``--seconds`` of fake time, samples at
``--sample-hz``, pool snapshots at 2 Hz, a real BlockBook's op log over ``--layers`` layers), then runs
``slabscope export`` on it in fresh processes (what a user sees: interpreter start, imports, reading the recording,
building and writing the trace), one warm-up per format, then ``--rounds`` rounds alternating the formats. Prints
the median and range of the wall time and the file size per format. mlx-free (the recording is synthetic).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from app.commands.arg_types import finite_float, positive_int

FORMATS = ("chrome", "perfetto")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=finite_float(1.0), default=3600.0, help="session length (default 3600)")
    parser.add_argument("--sample-hz", type=finite_float(0.0, above=True), default=10.0,
                        help="memory samples per second (default 10)")
    parser.add_argument("--layers", type=positive_int, default=28, help="pool layers (default 28)")
    parser.add_argument("--rounds", type=positive_int, default=5, help="timed rounds per format (default 5)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def _export_once(session: str, fmt: str, out_dir: str) -> tuple[float, int]:
    out = os.path.join(out_dir, f"trace.{fmt}")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "app", "export", session, "--format", fmt, "--out", out], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started, os.path.getsize(out)


def main(args: argparse.Namespace) -> int:
    from probes.synthetic import write_synthetic_session

    with tempfile.TemporaryDirectory(prefix="slabscope-bench-export-") as tmp:
        session = os.path.join(tmp, "session.slabrec")
        started = time.perf_counter()
        counts = write_synthetic_session(session, seconds=args.seconds, sample_hz=args.sample_hz,
                                         num_layers=args.layers)
        written_s = time.perf_counter() - started
        for fmt in FORMATS:  # warm-up: the OS page cache, .pyc files
            _export_once(session, fmt, tmp)
        walls: dict[str, list[float]] = {fmt: [] for fmt in FORMATS}
        sizes: dict[str, int] = {}
        for round_ in range(args.rounds):
            for fmt in (FORMATS if round_ % 2 == 0 else FORMATS[::-1]):
                wall, sizes[fmt] = _export_once(session, fmt, tmp)
                walls[fmt].append(wall)
    figures = {"session": {**counts, "seconds": args.seconds, "sample_hz": args.sample_hz, "layers": args.layers,
                           "write_s": round(written_s, 1)},
               "rounds": args.rounds,
               "formats": {fmt: {"wall_s_median": round(statistics.median(w), 2), "wall_s_min": round(min(w), 2),
                                 "wall_s_max": round(max(w), 2), "bytes": sizes[fmt]} for fmt, w in walls.items()}}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    s = figures["session"]
    print(f"session: {args.seconds:.0f} s at {args.sample_hz:g} Hz, {args.layers} layers: {s['samples']} samples, "
          f"{s['snapshots']} snapshots, {s['steps']} steps, {s['ops']} pool ops, {s['bytes'] / 1e6:.1f} MB recording")
    print(f"slabscope export in a fresh process, median [range] of {args.rounds} alternating rounds after a warm-up:")
    for fmt, f in figures["formats"].items():
        print(f"  {fmt:<9} {f['wall_s_median']:.2f} s [{f['wall_s_min']:.2f} .. {f['wall_s_max']:.2f}], "
              f"{f['bytes'] / 1e6:.1f} MB")
    return 0
