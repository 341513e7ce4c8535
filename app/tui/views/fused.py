"""Fused kernel view: per layer the current decision (fused / gather) and its reason, counts of each outcome, and
a lane of decline events over time."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from app.tui.views import frame_key, unchanged
from app.tui.data import Frame, Track
from app.tui.widgets.lane import Lane
from app.tui.widgets.palette import OK_STYLE, WARN_STYLE


def decisions_at(track: Track, snap: dict | None, cursor: float | None) -> dict[int, tuple[bool, str]]:
    """Per layer (use_fused, reason): the latest fused event up to the cursor, else the snapshot's own field."""
    out: dict[int, tuple[bool, str]] = {}
    for i, layer in enumerate((snap or {}).get("layers", []) or []):
        fused = layer.get("fused") or {}
        if fused:
            out[i] = (bool(fused.get("use_fused")), str(fused.get("reason", "")))
    for rec in track.fused:
        if cursor is not None and rec.t > cursor:
            break
        out[rec.layer] = (rec.use_fused, rec.reason)
    return out


LANE_POINTS = 160


def decision_lanes(track: Track, cursor: float | None) -> dict[str, list[tuple[float, str, str]]]:
    """Decline / fused marks over time: from fused-decision events when the run emits them, else from the
    per-layer decisions carried by the pool snapshots (a mark where any layer declined / used the kernel)."""
    if track.fused:
        recs = [r for r in track.fused if cursor is None or r.t <= cursor]
        return {"declines": [(r.t, "✗", WARN_STYLE) for r in recs if not r.use_fused],
                "fused": [(r.t, "✓", OK_STYLE) for r in recs if r.use_fused]}
    declines, accepts = [], []
    for t, _step, snap in track.history(cursor, limit=-LANE_POINTS):
        flags = [bool((layer.get("fused") or {}).get("use_fused")) for layer in snap.get("layers", []) or []]
        if flags and not all(flags):
            declines.append((t, "✗", WARN_STYLE))
        if any(flags):
            accepts.append((t, "✓", OK_STYLE))
    return {"declines": declines, "fused": accepts}


class FusedView(Vertical):
    """The Fused kernel tab."""

    def compose(self) -> ComposeResult:
        yield Static(id="fused-summary")
        table = DataTable(id="fused-table", zebra_stripes=True, cursor_type="row")
        table.add_columns("layer", "decision", "reason")
        yield table
        yield Lane(id="fused-lane")

    def refresh_view(self, frame: Frame) -> None:
        """Redraw the decision table, counts and decline lane for the chosen pool track."""
        track = frame.pool_track()
        found = frame.snapshot()
        if unchanged(self, (frame_key(frame), id(found[1]) if found else None, len(track.fused) if track else 0,
                            self.size)):
            return
        summary = self.query_one("#fused-summary", Static)
        if track is None:
            summary.update(Text("no pool backend in this run", style="dim"))
            return
        decisions = decisions_at(track, found[1] if found else None, frame.cursor)
        table = self.query_one(DataTable)
        table.clear()
        for layer, (use, reason) in sorted(decisions.items()):
            table.add_row(f"L{layer}", Text("fused" if use else "gather", style=OK_STYLE if use else WARN_STYLE),
                          reason)
        counters = (found[1].get("counters", {}) if found else {}) or {}
        reasons: dict[str, int] = {}
        for use, reason in decisions.values():
            if not use:
                reasons[reason] = reasons.get(reason, 0) + 1
        text = Text(f"{track.name}: layers fused {len(decisions) - sum(reasons.values())}, gather "
                    f"{sum(reasons.values())}  ", style="bold")
        text.append(f"(pool counters: fused {counters.get('fused_decisions', 0)}, gather "
                    f"{counters.get('gather_decisions', 0)} decisions)  ", style="dim")
        if reasons:
            top = max(reasons, key=reasons.get)
            text.append(f"declining now, mostly: {top}", style=WARN_STYLE)
        summary.update(text)
        self.query_one(Lane).show(track.duration or 1.0, decision_lanes(track, frame.cursor), frame.cursor)
