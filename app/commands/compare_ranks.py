"""``compare`` over rank recordings: each distributed run as one run (``probes.ranks``), mlx-free.

Printed, per run: its ranks (host, KV heads held, bytes per token, device memory, clock alignment, complete or
not); then the per-phase table with one row per rank (ratios against the baseline run's *same* rank), the merged
imbalance table (max/min footprint across ranks, the rank that peaks first, step skew) whether every rank ran
the same forward pass at every step, and whether runs and ranks generated the same tokens. Gates: the ordinary ones on the per-rank rows, ``--max-imbalance`` on the merged
rows, ``--same-outputs`` on the outputs; the ranks of one run generating different tokens always fails.
"""

from __future__ import annotations

import json
import sys


def per_rank_rows(runs, plain, wanted: str | None) -> list:
    """PhaseRows for every rank of every run (ranks compared with the same rank of the baseline run) and for the
    single-process sessions (compared among themselves), in run order."""
    from app.commands.session_files import pick_baseline
    from probes.compare import compare_sessions

    rows = []
    for rank in range(max((r.world_size for r in runs), default=0)):
        members = [r for r in runs if r.world_size > rank]
        views = [r.sessions[rank] for r in members]
        labels = [r.rank_label(rank) for r in members]
        rows += compare_sessions(views, baseline=pick_baseline(views, wanted), labels=labels)
    if plain:
        rows += compare_sessions(plain, baseline=pick_baseline(plain, wanted))
    order = {label: i for i, label in enumerate(r.rank_label(k) for r in runs for k in range(r.world_size))}
    return sorted(rows, key=lambda row: order.get(row.session, len(order)))


def merged(sessions, wanted: str | None = None) -> dict:
    """Everything the merged view shows, as objects: runs, plain sessions, rows, imbalance rows, outputs."""
    from probes.ranks import group_runs, imbalance_rows, outputs_report, step_alignment

    runs, plain = group_runs(sessions)
    lines, rank_failures, same = outputs_report(runs, plain)
    for run in runs:
        steps, mismatch = step_alignment(run)
        lines.insert(0, f"steps {run.label}: {steps} steps recorded by every rank, "
                        + ("the same forward pass on every rank" if mismatch is None else "NOT in lockstep"))
        rank_failures += [mismatch] if mismatch else []
    return {"runs": runs, "plain": plain, "rows": per_rank_rows(runs, plain, wanted),
            "imbalance": [row for run in runs for row in imbalance_rows(run)],
            "outputs": lines, "rank_output_failures": rank_failures, "same_outputs": same}


def render(view: dict) -> str:
    from probes.compare import format_table
    from probes.ranks import describe_run, format_imbalance

    parts = [line for run in view["runs"] for line in describe_run(run)]
    parts += ["", format_table(view["rows"]), ""]
    if view["runs"]:
        parts += ["imbalance across ranks (footprint = max(active+cache) in the phase; peak times and step skew on "
                  "rank 0's clock)", format_imbalance(view["imbalance"]), ""]
    parts += view["outputs"]
    return "\n".join(parts)


def print_merged(paths: list[str]) -> None:
    """``record``'s closing table over the recordings it wrote (errors are printed, not raised)."""
    from app.commands.session_files import open_sessions
    from probes.ranks import RankMergeError

    sessions, error = open_sessions(paths)
    try:
        view = merged(sessions) if sessions else None
    except RankMergeError as exc:
        view, error = None, str(exc)
    if view is None:
        print(f"slabscope record: {error}", file=sys.stderr)
        return
    print("\n" + render(view))


def gate_failures(view: dict, args) -> list[str]:
    from probes.compare import Gates, check_gates
    from probes.ranks import check_imbalance

    gates = Gates(args.max_ratio, args.max_fragmentation, args.max_mean_runs, args.max_decline_rate)
    failures = check_gates(view["rows"], gates) + check_imbalance(view["imbalance"], args.max_imbalance)
    failures += view["rank_output_failures"]
    if args.same_outputs and not view["same_outputs"]:
        failures.append("runs generated different tokens (--same-outputs)")
    return failures


def main(args, sessions) -> int:
    """The compare command over sessions that include rank recordings."""
    from probes.compare import rows_to_json
    from probes.ranks import RankMergeError

    try:
        view = merged(sessions, args.baseline)
    except RankMergeError as exc:
        print(f"slabscope compare: {exc}", file=sys.stderr)
        return 2
    failures = gate_failures(view, args)
    if args.json:
        runs = [{"run_id": r.run_id, "label": r.label, "world_size": r.world_size,
                 "launch_backend": r.launch_backend, "ranks": [s.path for s in r.sessions]} for r in view["runs"]]
        print(json.dumps({"runs": runs, "rows": rows_to_json(view["rows"]),
                          "imbalance": [_row_json(r) for r in view["imbalance"]], "outputs": view["outputs"],
                          "same_outputs": view["same_outputs"], "gate_failures": failures}, indent=2))
    else:
        print(render(view))
        for failure in failures:
            print(f"GATE FAILED: {failure}")
    return 1 if failures else 0


def _row_json(row) -> dict:
    from dataclasses import asdict

    out = asdict(row)
    out["footprints"] = list(row.footprints)
    return out
