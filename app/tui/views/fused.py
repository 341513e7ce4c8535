"""Fused kernel view: per layer the current decision (fused / gather) and its reason, counts of each outcome, and
a lane of decline events over time."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from app.tui.data import ViewState
from app.tui.views import frame_key, unchanged
from app.tui.widgets.lane import Lane
from app.tui.widgets.glossary_link import glossary_link
from app.tui.widgets.palette import NEUTRAL_STYLE, OK_STYLE
from pool import PoolCounters, PoolSnapshot
from probes.events import FusedChange, PrefillRouteChange
from probes.store import SessionModel


def decisions_at(model: SessionModel, snap: PoolSnapshot | None, cursor: float | None) -> dict[int, tuple[bool, str]]:
    """Per layer (use_fused, reason): the latest fused event up to the cursor, else the snapshot's own field."""
    out: dict[int, tuple[bool, str]] = {}
    for i, layer in enumerate(snap.layers if snap is not None else []):
        out[i] = (layer.fused.use_fused, layer.fused.reason)
    for event in model.events_of(FusedChange):
        if cursor is not None and event.t > cursor:
            break
        out[event.layer] = (event.use_fused, event.reason)
    return out


LANE_POINTS = 160


def decision_lanes(model: SessionModel, cursor: float | None) -> dict[str, list[tuple[float, str, str]]]:
    """Decline / fused marks over time: from fused-decision events when the run emits them, else from the
    per-layer decisions carried by the pool snapshots (a mark where any layer declined / used the kernel)."""
    events = model.events_of(FusedChange)
    if events:
        seen = [e for e in events if cursor is None or e.t <= cursor]
        return {"declines": [(e.t, "·", NEUTRAL_STYLE) for e in seen if not e.use_fused],
                "fused": [(e.t, "✓", OK_STYLE) for e in seen if e.use_fused]}
    declines, accepts = [], []
    for record in model.history(cursor, limit=-LANE_POINTS):
        flags = [layer.fused.use_fused for layer in record.snapshot.layers]
        if flags and not all(flags):
            declines.append((record.t, "·", NEUTRAL_STYLE))
        if any(flags):
            accepts.append((record.t, "✓", OK_STYLE))
    return {"declines": declines, "fused": accepts}


def prefill_line(model: SessionModel, counters: PoolCounters, cursor: float | None) -> Text | None:
    """"prefill: paged N / gather M chunk-layers, now: <route> (<reason>)" from the snapshot's counters and the
    latest ``prefill_route`` event up to the cursor; None for a run that recorded no prefill route (older
    recordings, dense)."""
    paged, gathered = counters.prefill_paged_decisions, counters.prefill_gather_decisions
    changes = [e for e in model.events_of(PrefillRouteChange) if cursor is None or e.t <= cursor]
    if paged is None and not changes:
        return None
    text = Text("\nprefill attention: ", style="bold")
    text.append(f"paged {paged or 0} / gather {gathered or 0} chunk-layer decisions", style="dim")
    if changes:
        last = changes[-1]
        text.append(f"  now: {'paged' if last.use_paged else 'gather'} ({last.reason})",
                    style=OK_STYLE if last.use_paged else NEUTRAL_STYLE)
    return text


class FusedView(Vertical):
    """The Fused kernel tab."""

    def compose(self) -> ComposeResult:
        yield Static(id="fused-summary")
        table = DataTable(id="fused-table", zebra_stripes=True, cursor_type="row")
        table.add_columns("layer", "decision", "reason")
        yield table
        yield Lane(id="fused-lane")

    def refresh_view(self, frame: ViewState) -> None:
        """Redraw the decision table, counts and decline lane for the chosen pool session."""
        track = frame.pool_session()
        found = frame.snapshot()
        changes = len(track.events_of(FusedChange)) if track else 0
        if unchanged(self, (frame_key(frame), id(found[1]) if found else None, changes, self.size)):
            return
        summary = self.query_one("#fused-summary", Static)
        if track is None:
            summary.update(Text("no pool backend in this run", style="dim"))
            return
        decisions = decisions_at(track, found[1] if found else None, frame.cursor_in(track))
        table = self.query_one(DataTable)
        table.clear()
        for layer, (use, reason) in sorted(decisions.items()):
            table.add_row(f"L{layer}", Text("fused" if use else "gather", style=OK_STYLE if use else NEUTRAL_STYLE),
                          reason)
        counters = found[1].counters if found else PoolCounters()
        reasons: dict[str, int] = {}
        for use, reason in decisions.values():
            if not use:
                reasons[reason] = reasons.get(reason, 0) + 1
        text = Text(f"{track.label}: layers fused {len(decisions) - sum(reasons.values())}, gather "
                    f"{sum(reasons.values())}  ", style="bold")
        text.append(f"(pool counters: fused {counters.fused_decisions}, gather "
                    f"{counters.gather_decisions} decisions)  ", style="dim")
        if reasons:
            top = max(reasons, key=reasons.get)
            text.append(f"gather now, mostly: {top}  ", style=NEUTRAL_STYLE)
        text.append_text(glossary_link("fused"))
        prefill = prefill_line(track, counters, frame.cursor_in(track))
        if prefill is not None:
            text.append_text(prefill)
        summary.update(text)
        cursor = frame.cursor_in(track)  # the lane is in the session's own seconds
        self.query_one(Lane).show(track.duration or 1.0, decision_lanes(track, cursor), cursor)
