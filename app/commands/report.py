"""``slabscope report SESSION... --out DIR``: Markdown report with tables and PNG plots, ready for a pull request.

A folder is read one file at a time (``app.commands.folder``: progress on stderr, Ctrl-C between two files): each
session is reduced to what the tables and plots need (``probes.digest``); the baseline is picked from those before
anything is written, then the first sessions are opened again for their accounting plots."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    from app.commands.outputs import add_force_argument

    p = sub.add_parser("report", help="write a Markdown report with PNG plots for recorded sessions",
                       description="Writes DIR/report.md plus timeline, accounting, slab-count and gather-run plots.")
    p.add_argument("sessions", nargs="+", help="session files (.slabrec) or directories holding them")
    p.add_argument("--out", required=True, help="output directory (one holding a report.md is refused unless --force)")
    add_force_argument(p, "the report already in DIR")
    p.add_argument("--baseline", default=None, help="label, backend or file of the baseline (default: dense)")
    p.set_defaults(func=main)


def main(args) -> int:
    from app.commands.session_files import expand_paths, pick_baseline
    from app.commands.errors import RunError, output_dir
    from app.commands.folder import read_each
    from probes.outfile import check_target
    from probes.report import ACCOUNTING_PLOTS, REPORT_NAME, report_digest, write_report_from

    paths = expand_paths(args.sessions)
    if not paths:
        print("slabscope report: no session files found", file=sys.stderr)
        return 2
    digests = read_each(paths, "report", lambda session, _index: report_digest(session))
    baseline = pick_baseline(digests, args.baseline)  # a bad --baseline is refused before --out is touched
    out = output_dir(args.out, "--out")
    check_target(out / REPORT_NAME, args.force, paths)  # an earlier report in DIR is kept unless asked
    try:
        accounting = _accounting_plots(paths[:ACCOUNTING_PLOTS], out)
        path = write_report_from(digests, str(out), baseline, accounting)
    except OSError as exc:  # disk full, a file in the way inside --out
        raise RunError(f"writing the report into {args.out!r} failed: {exc}") from None
    print(path)
    return 0


def _accounting_plots(paths: list[str], out) -> list[str]:
    """The accounting plots of ``paths`` (opened one at a time again: the plot needs every sample's parts)."""
    from probes.replay import Session
    from probes.report import plot_accounting

    names = []
    for index, path in enumerate(paths):
        names.append(f"accounting-{index}.png")
        plot_accounting(Session.open(path), str(out / names[-1]))
    return names
