"""``slabscope report SESSION... --out DIR``: Markdown report with tables and PNG plots, ready for a pull request."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="write a Markdown report with PNG plots for recorded sessions",
                       description="Writes DIR/report.md plus timeline, accounting, slab-count and gather-run plots.")
    p.add_argument("sessions", nargs="+", help="session files (.slabrec) or directories holding them")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--baseline", default=None, help="label, backend or file of the baseline (default: dense)")
    p.set_defaults(func=main)


def main(args) -> int:
    from app.commands.session_files import open_sessions, pick_baseline
    from app.commands.errors import RunError, output_dir
    from probes.report import write_report

    sessions, error = open_sessions(args.sessions, "report")
    if error:
        print(f"slabscope report: {error}", file=sys.stderr)
        return 2
    baseline = pick_baseline(sessions, args.baseline)
    output_dir(args.out, "--out")
    try:
        path = write_report(sessions, args.out, baseline=baseline)
    except OSError as exc:  # disk full, a file in the way inside --out
        raise RunError(f"writing the report into {args.out!r} failed: {exc}") from None
    print(path)
    return 0
