"""``slabscope whatif SESSION``: replay a session's op log through the pool bookkeeping with another geometry, and
size it: the peak footprint under that geometry (a model built on the measured samples), whether it fits given
memory sizes, the largest batch and context that fit, and the hard limits a size hits (probes/sizing.py)."""

from __future__ import annotations

import json
import sys

from app.commands.arg_types import SHRINK_MODES, byte_size, positive_byte_size, positive_int


def add_parser(sub) -> None:
    p = sub.add_parser("whatif", help="re-run a session's pool ops with another slab size, block size, design or "
                       "shrink policy",
                       description="Replays the recorded pool ops through the bookkeeping only (no model, no "
                       "mlx) and prints slab counts, reserved bytes, fragmentation and gather runs next to the "
                       "recorded configuration's replay.")
    p.add_argument("session", help="a recorded session (.slabrec) of a pool backend")
    p.add_argument("--slab-blocks", type=positive_int, default=None, help="rows (blocks) per slab")
    p.add_argument("--block-size", type=positive_int, default=None, help="tokens per block")
    p.add_argument("--design", choices=("slab", "monolithic"), default=None, help="storage design")
    p.add_argument("--shrink", choices=SHRINK_MODES, default=None,
                   help="shrink policy run at the recorded shrink points (default: the recorded one)")
    p.add_argument("--shrink-budget", type=byte_size, default=None, metavar="BYTES",
                   help="bytes one shrink point may move (default: the recorded budget)")
    p.add_argument("--memory", type=byte_size, action="append", default=None, metavar="SIZE",
                   help="memory size to size against, e.g. 24G (binary units; repeatable; default: 16G, 32G, 64G "
                        "and 128G)")
    p.add_argument("--max-buffer", type=positive_byte_size, default=None, metavar="SIZE",
                   help="the device's largest single buffer, >= 1 byte (default: the recording device's, where "
                        "recorded); a pool past it does not fit at any memory size")
    p.add_argument("--json", action="store_true", help="print both summaries and the sizing as JSON")
    p.set_defaults(func=main)


def _runs(summary: dict) -> str:
    mean, most = summary["mean_gather_runs"], summary["max_gather_runs"]
    return "-" if mean is None else f"{mean:.2f}/{most}"


def _rows() -> list[tuple[str, object]]:
    """(label, how to print it from a summary): the figures ``probes.figures`` defines under their labels there."""
    from probes.figures import LABELS, format_slabs
    from pool.units import mib

    def cell(key, spec):
        return lambda s: mib(s[key]) if spec == "mib" else format(s[key], spec)

    return [(f"{LABELS['slabs']}, max", lambda s: format_slabs(s["max_slabs"])),
            (f"{LABELS['slabs']}, end", lambda s: format_slabs(s["final_slabs"])),
            ("reserved MiB (peak)", cell("peak_bytes_reserved", "mib")),
            ("reserved MiB (end)", cell("final_bytes_reserved", "mib")),
            ("in use MiB (peak)", cell("peak_bytes_in_use", "mib")),
            ("fragmentation (max)", cell("max_fragmentation", ".3f")),
            ("fragmentation (mean)", cell("mean_fragmentation", ".3f")),
            (f"{LABELS['gather_runs']} ({{decode_steps}} decode steps)", _runs),
            ("slab appends", cell("slab_appends", "d")), ("grow events", cell("grow_events", "d")),
            ("bytes copied MiB (model)", cell("bytes_copied_model", "mib")),
            ("shrink points", cell("shrink_points", "d")), ("slabs released", cell("slab_releases", "d")),
            ("released MiB", cell("bytes_released", "mib")), ("blocks moved (row moves)", cell("blocks_moved", "d")),
            ("bytes moved MiB (model)", cell("bytes_moved_model", "mib"))]


def main(args) -> int:
    from app.commands.session_files import warn_damage
    from probes.errors import RecordingError, ReplayError
    from probes.replay import Session
    from probes.whatif import mismatches_with_recording, run_whatif

    from app.commands.whatif_sizing import print_sizing, sizing

    try:
        session = Session.open(args.session)
        warn_damage(session, "whatif")
        recorded = run_whatif(session)
        proposed = run_whatif(session, slab_blocks=args.slab_blocks, block_size=args.block_size, design=args.design,
                              shrink=args.shrink, shrink_budget=args.shrink_budget)
        problems = mismatches_with_recording(session, recorded)
        sized = sizing(session, args)
    except (RecordingError, ReplayError) as exc:
        print(f"slabscope whatif: {exc}", file=sys.stderr)
        return 2
    a, b = recorded.summary(), proposed.summary()
    if args.json:
        print(json.dumps({"recorded": a, "whatif": b, "recorded_replay_mismatches": problems,
                          "skipped_ops": proposed.skipped, "sizing": sized.to_json()}, indent=2))
        return 0
    fmt_cfg = lambda c: (f"{c['design']}, block {c['block_size']}, slab {c['slab_blocks']}, "  # noqa: E731
                         f"shrink {c['shrink']}")
    print(f"session: {session.path}  ({len(session.all_ops())} ops, {len(session.snapshots)} snapshot instants)")
    from probes.tables import Column, render_table

    columns = (Column(""), Column(f"recorded: {fmt_cfg(a['config'])}", right=True),
               Column(f"what-if: {fmt_cfg(b['config'])}", right=True))
    print(render_table(columns, [(label.format(decode_steps=a["decode_steps"]), show(a), show(b))
                                 for label, show in _rows()]))
    verdict = "exact" if not problems else f"{len(problems)} differences, first: {problems[0]}"
    print(f"replay of the recorded configuration vs the recording: {verdict}")
    if not proposed.shrink_points and args.shrink not in (None, "off"):
        print("the recording has no shrink points (made before shrink existed): the policy had nowhere to run")
    if proposed.skipped:
        print(f"{len(proposed.skipped)} ops not replayable with the new geometry (skipped), first: {proposed.skipped[0]}")
    print_sizing(sized)
    return 0
