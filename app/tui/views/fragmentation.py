"""Fragmentation view: per layer free rows, holes, largest free run against the next request's need, the
fragmentation index (1 - largest_free_run / free_rows), and their trend over the recent snapshots."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from app.tui.analysis import fragmentation_index, free_runs, next_request_need
from app.tui.views import frame_key, unchanged
from app.tui.data import Frame, Track
from app.tui.widgets.palette import OK_STYLE, WARN_STYLE

SPARK = "▁▂▃▄▅▆▇█"
TREND_POINTS = 16
COLUMNS = ("layer", "slabs", "free rows", "holes", "largest run", "need", "frag idx", "trend (frag idx)")


def layer_figures(layer: dict) -> tuple[int, int, int, float]:
    """(free rows, holes, largest free run, fragmentation index): the pool's own figures, computed when absent."""
    if all(k in layer for k in ("free_rows", "holes", "largest_free_run")):
        free, holes, largest = int(layer["free_rows"]), int(layer["holes"]), int(layer["largest_free_run"])
        frag = float(layer.get("fragmentation", fragmentation_index(free, largest)))
        return free, holes, largest, frag
    runs = free_runs(layer)
    free = sum(n for _, n in runs)
    largest = max((n for _, n in runs), default=0)
    return free, len(runs), largest, fragmentation_index(free, largest)


def sparkline(values: list[float], top: float = 1.0) -> str:
    """Values in [0, top] as block characters."""
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1)))] if top else SPARK[0] for v in values)


def layer_trends(track: Track, cursor: float | None, num_layers: int) -> list[list[float]]:
    """Fragmentation index per layer over the last TREND_POINTS snapshots up to the cursor."""
    snaps = [s for _t, _step, s in track.history(cursor, limit=TREND_POINTS)]
    trends: list[list[float]] = [[] for _ in range(num_layers)]
    for snap in snaps:
        for i, layer in enumerate((snap.get("layers") or [])[:num_layers]):
            trends[i].append(layer_figures(layer)[3])
    return trends


class FragmentationView(Vertical):
    """The Fragmentation tab."""

    def compose(self) -> ComposeResult:
        yield Static(id="frag-summary")
        table = DataTable(id="frag-table", zebra_stripes=True, cursor_type="row")
        table.add_columns(*COLUMNS)
        yield table

    def refresh_view(self, frame: Frame) -> None:
        """Rebuild the table from the chosen pool track's snapshot at the cursor."""
        track, found = frame.pool_track(), frame.snapshot()
        if unchanged(self, (frame_key(frame), id(found[1]) if found else None, len(track.snapshots) if track else 0)):
            return
        table = self.query_one(DataTable)
        summary = self.query_one("#frag-summary", Static)
        if track is None or found is None:
            summary.update(Text("no pool snapshot yet", style="dim"))
            table.clear()
            return
        snap = found[1]
        layers = snap.get("layers", []) or []
        need = next_request_need(snap, track)
        trends = layer_trends(track, frame.cursor, len(layers))
        rows, short, worst = [], 0, 0.0
        for i, layer in enumerate(layers):
            free, holes, largest, frag = layer_figures(layer)
            fits = largest >= need
            short += not fits
            worst = max(worst, frag)
            rows.append((f"L{i}", str(layer.get("num_slabs", 0)), str(free), str(holes),
                         Text(str(largest), style=OK_STYLE if fits else WARN_STYLE), str(need),
                         Text(f"{frag:.2f}", style=WARN_STYLE if frag >= 0.5 else ""), sparkline(trends[i])))
        row = table.cursor_row
        table.clear()
        table.add_rows(rows)
        if 0 <= row < len(rows):
            table.move_cursor(row=row)
        text = Text(f"{track.name} @ {found[0]:.1f}s  next request needs {need} blocks; ", style="bold")
        text.append(f"{short} layer(s) have no free run that long (it would split into more gather runs or mint "
                    "new rows)", style=WARN_STYLE if short else OK_STYLE)
        text.append(f"  worst frag idx {worst:.2f}  (index = 1 - largest free run / free rows)", style="dim")
        summary.update(text)
