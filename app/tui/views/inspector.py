"""Fragmentation inspector: pick a layer and a slab and see every row (owner colour, free, shared with refcount,
copied-on-write); pick a sequence to highlight its rows across all slabs (its gather runs); pick a free run to see
which sequence freed it and when. Works on whatever the cursor shows: a paused live snapshot or a recording."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, OptionList, Static
from textual.widgets.option_list import Option

from app.tui.analysis import free_run_origin, free_runs, gather_runs, rows_per_slab
from app.tui.data import ViewState, refresh_guarded
from app.tui.views import frame_key, unchanged
from app.tui.widgets.glossary_link import glossary_link
from app.tui.widgets.palette import seq_colour
from app.tui.widgets.row_map import RowMap
from pool import PoolSnapshot, row_state
from pool.ops import CopyOnWrite
from probes.store import SessionModel


def cow_rows(model: SessionModel, snap: PoolSnapshot, cursor: float | None) -> set[int]:
    """Layer-0 rows written by copy-on-write up to the cursor (the op log's ``CopyOnWrite`` ops mapped through the
    snapshot's rows per sequence; layers move in lockstep, so the same rows in every layer)."""
    seq_rows = snap.seq_rows or {}
    out: set[int] = set()
    for entry in model.ops_between(0.0, cursor):
        op = entry.op
        if isinstance(op, CopyOnWrite):
            rows = seq_rows.get(op.seq, [])
            if 0 <= op.logical_block < len(rows):
                out.add(rows[op.logical_block])
    return out


class InspectorView(Vertical):
    """The Inspector tab. Owns the selection: layer, slab, sequence, free run."""

    BINDINGS = [
        # listed on the view's header line and by ?, not in the footer (it keeps the app's keys at 80 columns)
        Binding("less_than_sign,comma", "layer(-1)", "layer -", show=False),
        Binding("greater_than_sign,full_stop", "layer(1)", "layer +", show=False),
        Binding("e", "next_seq", "next sequence", show=False),
        Binding("u", "next_free_run", "next free run", show=False),
        Binding("j", "slab(1)", "slab +", show=False),
        Binding("k", "slab(-1)", "slab -", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.layer_index = 0
        self.slab_index = 0
        self.seq: int | None = None
        self.run_index: int | None = None
        self._frame: ViewState | None = None
        self._seq_ids: list[int] = []
        self._runs: list[tuple[int, int]] = []

    def compose(self) -> ComposeResult:
        yield Static(id="inspect-header")
        with Horizontal():
            with VerticalScroll(id="inspect-map-box"):
                yield RowMap(id="inspect-map")
            with Vertical(id="inspect-side"):
                yield OptionList(id="inspect-seqs")
                yield OptionList(id="inspect-runs")
        yield Static(id="inspect-detail")
        table = DataTable(id="inspect-rows", zebra_stripes=True, cursor_type="row")
        table.add_columns("row", "state", "owner", "refcount", "cow")
        yield table

    # ---- drawing -------------------------------------------------------------------------------------------
    def refresh_view(self, frame: ViewState) -> None:
        """Redraw the row map, lists, detail line and row table for the current selection."""
        self._frame = frame
        track, found = frame.pool_session(), frame.snapshot()
        selection = (self.layer_index, self.slab_index, self.seq, self.run_index)
        if unchanged(self, (frame_key(frame), id(found[1]) if found else None, selection)):
            return
        header = self.query_one("#inspect-header", Static)
        if track is None or found is None:
            header.update(Text("no pool snapshot to inspect yet", style="dim"))
            return
        t, snap = found
        layers = snap.layers
        self.layer_index = max(0, min(self.layer_index, len(layers) - 1))
        layer = layers[self.layer_index] if layers else None
        per = rows_per_slab(snap)
        num_slabs = layer.num_chunks if layer is not None else 0
        self.slab_index = max(0, min(self.slab_index, num_slabs - 1))
        self._seq_ids = sorted(snap.seq_rows or {})
        self._runs = free_runs(snap) if layer is not None else []
        if self.seq is not None and self.seq not in self._seq_ids:
            self.seq = None
        if self.run_index is not None and self.run_index >= len(self._runs):
            self.run_index = None
        cows = cow_rows(track, snap, frame.cursor_in(track))
        run = self._runs[self.run_index] if self.run_index is not None else None
        owners = snap.row_owner or [] if layer is not None else []  # every layer holds these rows
        refcounts = snap.row_refcount or [] if layer is not None else []
        self.query_one(RowMap).show(owners, refcounts, per, num_slabs, slab=self.slab_index, seq=self.seq,
                                    free_run=run, cow_rows=cows)
        header.update(self._header(track, t, len(layers), num_slabs))
        self._fill_lists(snap, per)
        self.query_one("#inspect-detail", Static).update(self._detail(track, snap, t, per))
        self._fill_rows(owners, refcounts, per, cows)

    def _header(self, track: SessionModel, t: float, num_layers: int, num_slabs: int) -> Text:
        text = Text()  # wraps to a second line on narrow terminals: the legend and its glossary link stay visible
        text.append(f"{track.label} @ {t:.1f}s  ", style="bold")
        text.append(f"layer {self.layer_index}/{num_layers - 1} (<,>)  slab {self.slab_index}/{max(0, num_slabs - 1)} (↑↓)  ")
        text.append_text(glossary_link("inspect"))  # before the legend: a wrap moves legend words, never the link
        text.append("  e: next seq  u: next free run   ", style="dim")
        text.append("· free ◆ shared h held ", style="dim")
        text.append("u", style="underline")
        text.append("=cow", style="dim")
        return text

    def _fill_lists(self, snap: PoolSnapshot, per: int) -> None:
        seq_rows = snap.seq_rows or {}
        seq_opts = [Text.assemble(("■ ", seq_colour(s)), f"seq {s}: {len(seq_rows[s])} blocks, "
                                  f"{len(gather_runs(seq_rows[s], per))} runs") for s in self._seq_ids]
        run_opts = [f"free rows {a}-{a + n - 1} ({n})" for a, n in self._runs]
        self._replace_options("#inspect-seqs", seq_opts, "sequences (click: highlight)",
                              self._seq_ids.index(self.seq) if self.seq in self._seq_ids else None)
        self._replace_options("#inspect-runs", run_opts, "free runs (click: who freed it)", self.run_index)

    def _replace_options(self, selector: str, labels: list, title: str, highlighted: int | None) -> None:
        """Rebuild an OptionList only when its labels changed (keeps scroll and highlight stable)."""
        widget = self.query_one(selector, OptionList)
        widget.border_title = title
        plain = [str(x) for x in labels]
        if getattr(widget, "_labels", None) != plain:
            widget._labels = plain
            widget.clear_options()
            widget.add_options([Option(label) for label in labels])
        if highlighted is not None and widget.highlighted != highlighted:
            widget.highlighted = highlighted

    def _detail(self, track: SessionModel, snap: PoolSnapshot, t: float, per: int) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        if self.seq is not None:
            rows = (snap.seq_rows or {}).get(self.seq, [])
            runs = gather_runs(rows, per)
            text.append(f"seq {self.seq}: ", style=f"bold {seq_colour(self.seq)}")
            text.append(f"{len(rows)} blocks in {len(runs)} gather runs: ")
            text.append(" ".join(f"s{slab}x{n}" for slab, n in runs))
        if self.run_index is not None:
            first, length = self._runs[self.run_index]
            origin = free_run_origin(track, self.layer_index, first, length, t)
            text.append("\n" if self.seq is not None else "")
            text.append(f"free rows {first}-{first + length - 1}: ", style="bold")
            text.append(origin.describe(), style="dim" if origin.seq is None else "")
        if not text.plain:
            text.append("pick a sequence or a free run on the right", style="dim")
        return text

    def _fill_rows(self, owners: list[int], refs: list[int], per: int, cows: set[int]) -> None:
        table = self.query_one("#inspect-rows", DataTable)
        keep = table.cursor_row
        table.clear()
        for row in range(self.slab_index * per, (self.slab_index + 1) * per):
            owner = owners[row] if row < len(owners) else -1
            ref = refs[row] if row < len(refs) else 0
            state = row_state(owner, ref)
            owner_text = Text(str(owner), style=seq_colour(owner)) if owner >= 0 else Text("-", style="dim")
            table.add_row(str(row), state.value, owner_text, str(ref), "yes" if row in cows else "")
        if 0 <= keep < per:
            table.move_cursor(row=keep)

    # ---- interaction ---------------------------------------------------------------------------------------
    def _redraw(self) -> None:
        if self._frame is not None:
            refresh_guarded(self, self._frame)

    def on_row_map_slab_picked(self, message: RowMap.SlabPicked) -> None:
        self.slab_index = message.slab
        self._redraw()

    def on_option_list_option_selected(self, message: OptionList.OptionSelected) -> None:
        if message.option_list.id == "inspect-seqs" and message.option_index < len(self._seq_ids):
            picked = self._seq_ids[message.option_index]
            self.seq = None if self.seq == picked else picked
        elif message.option_list.id == "inspect-runs":
            self.run_index = None if self.run_index == message.option_index else message.option_index
        self._redraw()

    def action_layer(self, delta: int) -> None:
        self.layer_index = max(0, self.layer_index + delta)
        self._redraw()

    def action_slab(self, delta: int) -> None:
        self.query_one(RowMap).action_move(delta)

    def action_next_seq(self) -> None:
        if self._seq_ids:
            i = self._seq_ids.index(self.seq) + 1 if self.seq in self._seq_ids else 0
            self.seq = self._seq_ids[i % len(self._seq_ids)]
            self._redraw()

    def action_next_free_run(self) -> None:
        if self._runs:
            self.run_index = 0 if self.run_index is None else (self.run_index + 1) % len(self._runs)
            self._redraw()
