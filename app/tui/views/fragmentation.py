"""Fragmentation view: per layer free rows, holes, largest free run against the next request's need, the
fragmentation index (1 - largest_free_run / free_rows), and their trend over the recent snapshots."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from app.tui.analysis import next_request_need
from app.tui.data import ViewState
from app.tui.views import frame_key, unchanged
from app.tui.widgets.glossary_link import glossary_link
from app.tui.widgets.palette import ATTENTION_STYLE, OK_STYLE
from probes.store import SessionModel

SPARK = "▁▂▃▄▅▆▇█"
TREND_POINTS = 16
COLUMNS = ("layer", "slabs", "free rows", "holes", "largest run", "need", "frag idx", "trend (frag idx)")


def sparkline(values: list[float], top: float = 1.0) -> str:
    """Values in [0, top] as block characters, on that fixed scale. Textual's ``Sparkline`` (issue 27 asked whether
    it fits) scales each series to its own min..max and draws a single value as a full bar: a trend of 0.02, 0.02,
    0.03 drew as "▁▁█" and one snapshot at 0.0 as "█" (in its max colour), so a healthy layer looked fragmented;
    it is also a widget or renderable, not text a table cell sorts and copies."""
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1)))] if top else SPARK[0] for v in values)


def layer_trends(model: SessionModel, cursor: float | None, num_layers: int) -> list[list[float]]:
    """Fragmentation index per layer over the last TREND_POINTS snapshots up to the cursor (summaries suffice)."""
    trends: list[list[float]] = [[] for _ in range(num_layers)]
    for record in model.history(cursor, limit=TREND_POINTS):
        for i, layer in enumerate(record.snapshot.layers[:num_layers]):
            trends[i].append(layer.fragmentation)
    return trends


def fragmentation_figures(layers, need: int) -> tuple[list[tuple[float, int, bool]], int, float]:
    """Per layer (its fragmentation index, its largest free run, whether that run holds the next request's
    ``need`` blocks), how many layers it does not fit, and the worst (largest) index: what the table and the
    summary line show."""
    per_layer, short, worst = [], 0, 0.0
    for layer in layers:
        frag, largest = layer.fragmentation, layer.largest_free_run
        fits = largest >= need
        short += not fits
        worst = max(worst, frag)
        per_layer.append((frag, largest, fits))
    return per_layer, short, worst


class FragmentationView(Vertical):
    """The Fragmentation tab."""

    def compose(self) -> ComposeResult:
        yield Static(id="frag-summary")
        table = DataTable(id="frag-table", zebra_stripes=True, cursor_type="row")
        table.add_columns(*COLUMNS)
        yield table

    def refresh_view(self, frame: ViewState) -> None:
        """Rebuild the table from the chosen pool session's snapshot at the cursor."""
        track, found = frame.pool_session(), frame.snapshot()
        if unchanged(self, (frame_key(frame), id(found[1]) if found else None, len(track.snapshots) if track else 0)):
            return
        table = self.query_one(DataTable)
        summary = self.query_one("#frag-summary", Static)
        if track is None or found is None:
            summary.update(Text("no pool snapshot yet", style="dim"))
            table.clear()
            return
        snap = found[1]
        layers = snap.layers
        need = next_request_need(snap, track)
        trends = layer_trends(track, frame.cursor_in(track), len(layers))
        figures, short, worst = fragmentation_figures(layers, need)
        rows = []
        for i, (layer, (frag, largest, fits)) in enumerate(zip(layers, figures)):
            rows.append((f"L{i}", str(layer.num_chunks), str(layer.free_rows), str(layer.holes),
                         Text(str(largest), style="" if fits else ATTENTION_STYLE), str(need),
                         Text(f"{frag:.2f}", style=ATTENTION_STYLE if frag >= 0.5 else ""), sparkline(trends[i])))
        row = table.cursor_row
        table.clear()
        table.add_rows(rows)
        if 0 <= row < len(rows):
            table.move_cursor(row=row)
        text = Text(f"{track.label} @ {found[0]:.1f}s  next request needs {need} blocks; ", style="bold")
        text.append(f"{short} layer(s) have no free run that long (it would split into more gather runs or mint "
                    "new rows)", style=ATTENTION_STYLE if short else OK_STYLE)
        text.append(f"  worst frag idx {worst:.2f}  (index = 1 - largest free run / free rows)  ", style="dim")
        text.append_text(glossary_link("frag"))
        summary.update(text)
