"""``slabscope compare SESSION...``: per-phase comparison table (or --json) with CI gates (exit 1 when exceeded)."""

from __future__ import annotations

import json
import sys

from app.commands.arg_types import finite_float
from app.commands.session_files import open_sessions, pick_baseline


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
    from probes.compare import Gates, check_gates, compare_sessions, format_table, rows_to_json

    sessions, error = open_sessions(args.sessions)
    if error:
        print(f"slabscope compare: {error}", file=sys.stderr)
        return 2
    if args.same_outputs or any(s.meta.get("distributed") for s in sessions):  # rank recordings: runs merged
        from app.commands.compare_ranks import main as compare_ranks

        return compare_ranks(args, sessions)
    baseline = pick_baseline(sessions, args.baseline)
    rows = compare_sessions(sessions, baseline=baseline)
    gates = Gates(args.max_ratio, args.max_fragmentation, args.max_mean_runs, args.max_decline_rate)
    failures = check_gates(rows, gates)
    if args.json:
        print(json.dumps({"baseline": sessions[baseline].path, "rows": rows_to_json(rows), "gate_failures": failures},
                         indent=2))
    else:
        print(f"baseline: {sessions[baseline].meta.get('backend', '?')} ({sessions[baseline].path})")
        print(format_table(rows))
        for s in sessions:
            if not s.complete and s.damage is None:  # a damaged file was announced on stderr
                print(f"note: {s.path} is incomplete (writer stopped early); figures cover what it holds")
        for failure in failures:
            print(f"GATE FAILED: {failure}")
    return 1 if failures else 0
