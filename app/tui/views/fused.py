"""Fused kernel view: per layer the decision in force at the cursor (fused / gather) and its reason, the declines
figure up to the cursor (``probes.figures.declines``: decode-step layer decisions that gathered, by reason class), and
a lane of the decode steps that declined or ran fused."""

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
from probes import figures
from probes.events import FusedChange, GatherRuns, PrefillRouteChange
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
    """Per decode step up to the cursor (``probes.figures.decision_steps``, the steps the declines count is made
    of): a decline mark where any layer gathered, a fused mark where any layer ran the kernel; at most LANE_POINTS
    of each, evenly spread (a step with a decline is never dropped for one without)."""
    steps = figures.decision_steps(model, None, cursor)
    declined = [(s.t, "·", NEUTRAL_STYLE) for s in steps if s.gather]  # a decline is a choice, not a failure
    fused = [(s.t, "✓", OK_STYLE) for s in steps if s.fused]
    return {"declines": _spread(declined), "fused": _spread(fused)}


def _spread(marks: list) -> list:
    stride = max(1, -(-len(marks) // LANE_POINTS))
    return marks[::stride]


def declines_text(figure) -> Text:
    """The declines figure up to the cursor: "declines 0/896 decode-step layer decisions" (by reason class)."""
    label = figures.LABELS["declines"]
    if figure is None:
        return Text(f"{label}: - (no fused-kernel decision up to here)", style=NEUTRAL_STYLE)
    text = Text(f"{label} {figures.format_declines(figure)} decode-step layer decisions up to here",
                style=NEUTRAL_STYLE)
    if figure.by_class:
        text.append(" (" + ", ".join(f"{name} {n}" for name, n in figure.by_class.items()) + ")", style=NEUTRAL_STYLE)
    return text


def fused_summary(track: SessionModel, decisions: dict[int, tuple[bool, str]], cursor: float | None) -> Text:
    """The Fused tab's header: the layers' decisions in force at the cursor ("now"), then the declines figure from
    the start up to the cursor (``probes.figures.declines``)."""
    now_gather: dict[str, int] = {}
    for use, reason in decisions.values():
        if not use:
            now_gather[reason] = now_gather.get(reason, 0) + 1
    text = Text(f"{track.label} now: layers fused {len(decisions) - sum(now_gather.values())}, gather "
                f"{sum(now_gather.values())}  ", style="bold")
    text.append_text(glossary_link("fused"))  # before the figures: a wrap moves their words, never the link
    text.append("  ")
    text.append_text(declines_text(figures.declines(track, None, cursor)))
    if now_gather:
        top = max(now_gather, key=now_gather.get)
        text.append(f"  gather now, mostly: {top}", style=NEUTRAL_STYLE)
    return text


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
        changes = (len(track.events_of(FusedChange)), len(track.events_of(GatherRuns)),
                   len(track.events_of(PrefillRouteChange))) if track else None
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
        text = fused_summary(track, decisions, frame.cursor_in(track))
        counters = found[1].counters if found else PoolCounters()
        prefill = prefill_line(track, counters, frame.cursor_in(track))
        if prefill is not None:
            text.append_text(prefill)
        summary.update(text)
        cursor = frame.cursor_in(track)  # the lane is in the session's own seconds
        self.query_one(Lane).show(track.duration or 1.0, decision_lanes(track, cursor), cursor)
