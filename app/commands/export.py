"""``slabscope export SESSION... --format perfetto|chrome --out FILE``: recorded sessions as a trace for standard viewers.

One process per session (slab, dense and monolithic side by side, each from its own start): counter tracks (memory,
pool bytes, slabs, occupancy and fragmentation per layer, gather runs), slices (phases, steps) and instants (pool
growth and releases, fused/gather decisions with their reasons, errors). ``probes/trace_export.py`` says what each
track is; docs/export.md how to open the file. Nothing is written unless every session reads (one-line error, exit
2) and the file is complete: written to a temporary file beside FILE, synced, then renamed
(``probes.outfile.write_atomically``); FILE is never one of the sessions read (symlinks and hard links included),
and an existing FILE is replaced only with ``--force``. A failed write is one line, exit 1, FILE as it was.
"""

from __future__ import annotations

import sys
import time

FORMATS = ("perfetto", "chrome")


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="export recorded sessions as a Perfetto or Chrome trace",
                       description="Writes recorded sessions as one trace file: Perfetto's protobuf (--format "
                       "perfetto, open in ui.perfetto.dev) or Chrome's JSON trace format (--format chrome, open in "
                       "chrome://tracing or ui.perfetto.dev). One process per session.")
    p.add_argument("sessions", nargs="+", help="session files (.slabrec) or directories holding them")
    p.add_argument("--out", required=True, metavar="FILE", help="trace file to write (a new file unless --force)")
    p.add_argument("--force", action="store_true",
                   help="replace FILE when it exists (never one of the sessions read)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="perfetto (protobuf) or chrome (JSON); default: chrome for a FILE ending in .json, "
                        "else perfetto")
    p.set_defaults(func=main)


def trace_format(args) -> str:
    if args.format is not None:
        return args.format
    return "chrome" if args.out.lower().endswith(".json") else "perfetto"


def main(args) -> int:
    from app.commands.session_files import expand_paths, open_sessions
    from app.commands.errors import RunError, output_file
    from probes.outfile import check_target, write_atomically
    from probes.trace_export import trace_processes

    fmt = trace_format(args)
    target = output_file(args.out, "--out")
    inputs = expand_paths(args.sessions)
    check_target(target, args.force, inputs)  # before reading anything: an existing FILE, or an input, is one line
    started = time.perf_counter()
    sessions, error = open_sessions(args.sessions, "export")
    if error:
        print(f"slabscope export: {error}", file=sys.stderr)
        return 2
    processes = trace_processes(zip(sessions, inputs))
    try:
        size = write_atomically(target, lambda temp: _writer(fmt)(processes, temp), force=args.force, inputs=inputs)
    except ImportError as exc:
        raise RunError(f"--format perfetto needs the 'perfetto' package ({exc}); --format chrome needs none") from None
    counters = sum(len(p.counters) for p in processes)
    marks = sum(len(marks) for p in processes for marks in p.tracks.values())
    print(f"wrote {target} ({fmt}, {size / 1e6:.1f} MB): {len(processes)} session(s), {counters} counter tracks, "
          f"{marks} slices and instants, in {time.perf_counter() - started:.1f} s; open it in ui.perfetto.dev"
          + (" or chrome://tracing" if fmt == "chrome" else ""))
    return 0


def _writer(fmt: str):
    if fmt == "chrome":
        from probes.trace_chrome import write_chrome

        return write_chrome
    from probes.trace_perfetto import write_perfetto

    return write_perfetto
