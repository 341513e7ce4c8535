"""RowMap: every physical row of a layer (every layer holds the same rows), one line per slab, one character per
row.

A row shows its owning sequence (base-36 id in the sequence's colour), ``·`` free, ``◆`` shared (refcount > 1),
``h`` held by a prefix handle; what a row is comes from ``pool.row_state``. Rows written by copy-on-write are
underlined. The chosen slab's line is marked ``▶``; the chosen sequence's rows are shown reversed in every slab (its
gather runs); a chosen free run is shown as ``░``. Up/down (or a click) picks the slab; the view listens to
``RowMap.SlabPicked``.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget

from app.tui.widgets.palette import FREE_STYLE, HELD_STYLE, SHARED_STYLE, seq_colour
from app.tui.widgets.styled import SpanBuffer
from pool import RowState, row_state

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
LABEL_W = 5


class RowMap(Widget, can_focus=True):
    """Rows of one layer. Owns its selection state (slab, sequence, free run); mutates nothing else."""

    DEFAULT_CSS = "RowMap { height: auto; }"
    BINDINGS = [Binding("up", "move(-1)", "slab up", show=False), Binding("down", "move(1)", "slab down", show=False)]

    class SlabPicked(Message):
        def __init__(self, slab: int) -> None:
            super().__init__()
            self.slab = slab

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.owners: list[int] = []
        self.refcounts: list[int] = []
        self.per_slab = 1
        self.num_slabs = 0
        self.slab = 0
        self.seq: int | None = None
        self.free_run: tuple[int, int] | None = None
        self.cow_rows: set[int] = set()

    def show(self, owners: list[int], refcounts: list[int], per_slab: int, num_slabs: int, *, slab: int,
             seq: int | None, free_run: tuple[int, int] | None, cow_rows: set[int]) -> None:
        """Replace the layer's rows and the selection to draw (no repaint when nothing changed)."""
        signature = (id(owners), id(refcounts), per_slab, num_slabs, slab, seq, free_run, len(cow_rows))
        if signature == getattr(self, "_signature", None):
            return
        self._signature = signature
        self.owners, self.refcounts = owners, refcounts
        self.per_slab, self.num_slabs = max(1, per_slab), num_slabs
        self.slab, self.seq, self.free_run, self.cow_rows = slab, seq, free_run, cow_rows
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, self.num_slabs)

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        if not self.num_slabs:
            return Text("no rows in this layer yet", style="dim")
        run = range(self.free_run[0], self.free_run[0] + self.free_run[1]) if self.free_run else range(0)
        for slab in range(self.num_slabs):
            if slab:
                text.append("\n")
            marker = "▶" if slab == self.slab else " "
            text.append(f"{marker}s{slab:<3d}", style="bold" if slab == self.slab else "dim")
            spans = SpanBuffer(text)
            for row in range(slab * self.per_slab, (slab + 1) * self.per_slab):
                self._append_row(spans, row, row in run)
            spans.flush()
        return text

    def _append_row(self, text: SpanBuffer, row: int, in_run: bool) -> None:
        owner = self.owners[row] if row < len(self.owners) else -1
        ref = self.refcounts[row] if row < len(self.refcounts) else 0
        state = row_state(owner, ref)
        if state is RowState.FREE:
            text.add("░" if in_run else "·", "bold reverse" if in_run else FREE_STYLE)
            return
        if state is RowState.HANDLE:
            glyph, style = "h", HELD_STYLE
        elif state is RowState.SHARED:
            glyph, style = "◆", SHARED_STYLE
        else:
            glyph, style = DIGITS[owner % 36], f"bold {seq_colour(owner)}"
        if row in self.cow_rows:
            style += " underline"
        if self.seq is not None and owner == self.seq:
            style += " reverse"
        text.add(glyph, style)

    def action_move(self, delta: int) -> None:
        if self.num_slabs:
            self.post_message(self.SlabPicked((self.slab + delta) % self.num_slabs))

    def on_click(self, event: events.Click) -> None:
        if 0 <= event.y < self.num_slabs:
            self.post_message(self.SlabPicked(event.y))
