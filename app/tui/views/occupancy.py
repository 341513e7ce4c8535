"""Slab occupancy view: totals (slabs, rows live / shared / held / free, bytes reserved vs in use, and what shrink
points released and moved) and the layers x slabs grid of the chosen pool backend at the cursor."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from app.tui.analysis import ShrinkSoFar, pool_totals, shrink_so_far
from app.tui.data import ViewState
from app.tui.views import frame_key, unchanged
from app.tui.widgets.glossary_link import glossary_link
from app.tui.widgets.palette import OCCUPANCY, SHARED_STYLE, human_bytes
from app.tui.widgets.slab_grid import SlabGrid
from pool import PoolSnapshot


def totals_text(name: str, t: float, snap: PoolSnapshot, shrink: ShrinkSoFar | None = None) -> Text:
    """Two lines of totals for one snapshot; a third when a shrink gave slabs back or moved blocks by then."""
    tot = pool_totals(snap)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{name} ({snap.design}) @ {t:.1f}s  ", style="bold")
    text.append(f"slabs {tot.slabs}  rows live {tot.live_rows}  shared {tot.shared_rows}  held {tot.held_rows}  "
                f"free {tot.free_rows}\n")
    text.append(f"bytes reserved {human_bytes(tot.bytes_reserved)}  in use {human_bytes(tot.bytes_in_use)}")
    if tot.bytes_reserved:
        text.append(f" ({100 * tot.bytes_in_use / tot.bytes_reserved:.0f}%)")
    if snap.design == "slab":
        geometry = f"  block {snap.block_size} tok, slab {snap.slab_blocks} blocks  "
    else:  # monolithic: one tensor per layer; its cells here are the grow-by-copy chunks
        geometry = f"  block {snap.block_size} tok, one tensor per layer (cells = grow chunks)  "
    text.append(geometry, style="dim")
    for glyph, colour in (OCCUPANCY[0], OCCUPANCY[4], OCCUPANCY[-1]):
        text.append(glyph, style=colour)
    text.append(" empty→full ", style="dim")
    text.append("s", style=SHARED_STYLE)
    text.append(" shared  ", style="dim")
    text.append_text(glossary_link("slabs"))
    counters = snap.counters
    if counters.slab_releases or counters.blocks_moved:
        text.append("\n")
        text.append_text(shrink_text(snap, shrink))
    return text


def shrink_text(snap: PoolSnapshot, shrink: ShrinkSoFar | None) -> Text:
    """What shrink points did by the snapshot's instant (its counters: exact at any instant), and the latest one
    (the session's ``Shrunk`` events)."""
    counters = snap.counters
    unit = "slabs" if snap.design == "slab" else "grow chunks"
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("shrink ", style="bold")
    text.append(f"released {counters.slab_releases} {unit} ({human_bytes(counters.bytes_released)})  moved "
                f"{counters.blocks_moved} blocks ({human_bytes(counters.bytes_moved)} measured)")
    last = shrink.last if shrink is not None else None
    if last is not None:
        report = last.report
        text.append(f"  last @ {last.t:.1f}s: -{report.slabs_released} {unit}, {report.blocks_moved} moves in "
                    f"{report.move_s * 1e3:.1f} ms, footprint {_signed(-report.reclaimed)}", style="dim")
    return text


def _signed(value: int) -> str:
    return ("+" if value > 0 else "-" if value < 0 else "±") + human_bytes(abs(value))


class OccupancyView(Vertical):
    """The Slab occupancy tab."""

    def compose(self) -> ComposeResult:
        yield Static(id="occupancy-totals")
        with VerticalScroll(id="slab-scroll"):
            yield SlabGrid(id="slab-grid")

    def refresh_view(self, frame: ViewState) -> None:
        """Redraw totals and grid from the chosen pool session's snapshot at the cursor."""
        track = frame.pool_session()
        found = frame.snapshot()
        if unchanged(self, (frame_key(frame), id(found[1]) if found else None, self.size)):
            return
        label = self.query_one("#occupancy-totals", Static)
        if track is None or found is None:
            label.update(Text("no pool snapshot yet: pool views need a slab or monolithic backend", style="dim"))
            self.query_one(SlabGrid).show(None)
            return
        label.update(totals_text(track.label, found[0], found[1], shrink_so_far(track, frame.cursor_in(track))))
        self.query_one(SlabGrid).show(found[1])
