"""``slabscope compare SESSION...``: per-phase comparison table (or --json) with CI gates (exit 1 when exceeded)."""

from __future__ import annotations

import json
import sys

from app.commands.arg_types import finite_float
from app.commands.session_files import expand_paths, pick_baseline


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="compare recorded sessions per phase; gates exit non-zero when exceeded",
                       description="Compare two or more recorded sessions per phase. The first session (or "
                       "--baseline) is the baseline for ratios. Exit status: 0 ok, 1 a gate was exceeded, "
                       "2 unreadable input.")
    p.add_argument("sessions", nargs="+", help="session files (.slabrec) or directories holding them")
    p.add_argument("--baseline", default=None, help="label, backend or file of the baseline (default: dense if "
                   "present, else the first session)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    gate = finite_float(0.0)  # NaN would compare false and never fail
    p.add_argument("--max-ratio", type=gate, default=None, help="fail if a footprint ratio vs baseline exceeds R")
    p.add_argument("--max-fragmentation", type=gate, default=None, help="fail if fragmentation exceeds F")
    p.add_argument("--max-mean-runs", type=gate, default=None, help="fail if mean gather runs exceed N")
    p.add_argument("--max-decline-rate", type=gate, default=None, help="fail if the fused decline rate exceeds D")
    p.add_argument("--max-imbalance", type=gate, default=None, help="rank recordings: fail if a phase's max/min "
                   "footprint across the ranks of a run exceeds R")
    p.add_argument("--same-outputs", action="store_true", help="fail unless every run generated the same tokens")
    p.set_defaults(func=main)


def main(args) -> int:
    """The table (or --json) and the gates over every named session, read one file at a time (``folder.py``)."""
    from probes.compare import Gates, check_gates, format_table, rows_from_figures, rows_to_json
    from probes.digest import digest

    from app.commands.folder import read_each

    paths = expand_paths(args.sessions)
    if not paths:
        print("slabscope compare: no session files found", file=sys.stderr)
        return 2
    digests = read_each(paths, "compare", lambda session, _index: digest(session))
    if args.same_outputs or any(d.distributed for d in digests):  # rank recordings: their runs merged
        from app.commands.compare_ranks import main as compare_ranks

        from probes.replay import Session

        # rank runs are a few files, and merging them needs them whole (damage was announced while reading)
        return compare_ranks(args, [Session.open(path) for path in paths])
    baseline = pick_baseline(digests, args.baseline)
    labels = [str(d.meta.get("label") or d.meta.get("backend") or f"session{i}") for i, d in enumerate(digests)]
    rows = rows_from_figures([d.phases for d in digests], labels,
                             [str(d.meta.get("backend", "?")) for d in digests], baseline)
    gates = Gates(args.max_ratio, args.max_fragmentation, args.max_mean_runs, args.max_decline_rate)
    failures = check_gates(rows, gates)
    if args.json:
        print(json.dumps({"baseline": digests[baseline].path, "rows": rows_to_json(rows), "gate_failures": failures},
                         indent=2))
    else:
        print(f"baseline: {digests[baseline].meta.get('backend', '?')} ({digests[baseline].path})")
        print(format_table(rows))
        for d in digests:
            if not d.complete and d.damage is None:  # a damaged file was announced on stderr
                print(f"note: {d.path} is incomplete (writer stopped early); figures cover what it holds")
        for failure in failures:
            print(f"GATE FAILED: {failure}")
    return 1 if failures else 0
