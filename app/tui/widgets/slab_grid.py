"""SlabGrid: layers x slabs, each slab a glyph coloured by its occupancy.

Wide terminals get a three-character cell per slab (fill glyph twice, then a state mark: ``s`` when the slab holds
shared rows, ``h`` for rows held only by a prefix handle); when the widest layer does not fit, every layer becomes a
compact strip of one character per slab. Rendering is one ``rich.Text`` per refresh (28 x 64 slabs is ~1.8k
segments), so no child widget per slab.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from app.tui.analysis import SlabCell, slab_cells
from app.tui.widgets.palette import HELD_STYLE, SHARED_STYLE, occupancy_glyph
from app.tui.widgets.styled import SpanBuffer
from pool import PoolSnapshot

LABEL_WIDTH = 6  # "L27 " plus margin


class SlabGrid(Widget):
    """Occupancy grid of one pool snapshot. Owns only the last snapshot handed to ``show``."""

    DEFAULT_CSS = "SlabGrid { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[list[SlabCell]] = []
        self.compact = False

    def show(self, snap: PoolSnapshot | None) -> None:
        """Take a new snapshot (None clears) and repaint; the same snapshot object again changes nothing."""
        if snap is not None and snap is getattr(self, "_snap", None):
            return
        self._snap = snap
        self._rows = [slab_cells(snap, layer) for layer in snap.layers] if snap is not None else []
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self._rows)) + 1

    def render(self) -> Text:
        if not self._rows:
            return Text("no pool snapshot yet (dense backend, or the run has not written KV)", style="dim")
        widest = max(len(r) for r in self._rows)
        self.compact = LABEL_WIDTH + 3 * widest > self.size.width
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(self._header(widest), style="dim")
        for index, cells in enumerate(self._rows):
            text.append(f"\nL{index:<{LABEL_WIDTH - 2}d} ", style="bold")
            spans = SpanBuffer(text)
            for cell in cells:
                self._append_cell(spans, cell)
            spans.flush()
        return text

    def _header(self, widest: int) -> str:
        step = 1 if self.compact else 3
        marks = "".join(
            (str(i).ljust(step * 10)[: step * 10] if i % 10 == 0 else "") for i in range(widest)
        )
        return " " * LABEL_WIDTH + ("slab " + marks[5:] if len(marks) > 5 else marks)

    def _append_cell(self, spans: SpanBuffer, cell: SlabCell) -> None:
        glyph, colour = occupancy_glyph(cell.fraction)
        if self.compact:
            spans.add(glyph, SHARED_STYLE if cell.shared else colour)
            return
        spans.add(glyph * 2, colour)
        if cell.shared:
            spans.add("s", SHARED_STYLE)
        elif cell.held:
            spans.add("h", HELD_STYLE)
        else:
            spans.add(" ", "")
