"""Memory view: footprint and RSS per backend, phase lines and names, peak markers, when requests finished and when
shrink points gave memory back (with the bytes reclaimed), the slab/dense ratio against the gate, tok/s per
backend, and the accounting stack at the cursor."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from app.tui.analysis import accounting, shrink_so_far
from app.tui.data import ViewState
from app.tui.views import frame_key, unchanged
from app.tui.widgets.accounting_bar import AccountingBar
from app.tui.widgets.lane import Lane
from app.tui.widgets.memory_chart import ChartData, MemoryChart, Series
from app.tui.widgets.palette import OK_STYLE, WARN_STYLE, backend_colour, human_bytes
from probes import figures
from probes.events import RequestDone, Shrunk
from probes.store import SessionModel

X_LABELS = {"time": "time (s)", "step": "step", "tokens": "tokens"}
BAND_POINTS = 240  # marks per phase band in the phase lane (more than any terminal is wide)


def x_values(samples, mode: str) -> list[float]:
    """The x value of every sample of a ``SampleWindow`` in the chosen mode."""
    if mode == "step":
        return [float(v) for v in samples.step]
    if mode == "tokens":
        return [float(v) for v in samples.tokens]
    return samples.t


def max_footprint(model: SessionModel, cursor: float | None) -> float:
    """max(active + cache) over samples up to the cursor (``probes.figures.peak_footprint``; 0 before a sample)."""
    return figures.peak_footprint(model, None, cursor) or 0.0


def ratio_gauge(ratio: float, gate: float, width: int = 12) -> Text:
    """A small bar from 0.5x to 1.5x (wider when the gate is above that) with the gate drawn as ┃."""
    top = max(1.5, gate * 1.1, min(ratio, 3.0))
    pos = lambda r: min(width - 1, max(0, int((r - 0.5) / (top - 0.5) * (width - 1))))  # noqa: E731
    fill, mark = pos(ratio), pos(gate)
    text = Text("▕")
    for i in range(width):
        if i == mark:
            text.append("┃", style=WARN_STYLE)
        else:
            text.append("█" if i <= fill else " ", style=OK_STYLE if ratio <= gate else WARN_STYLE)
    text.append("▏")
    return text


def ratio_line(frame: ViewState) -> Text:
    """'slab/dense 1.02x (gate 1.15x) ok' for each pool session against the dense one (a rank against the same
    rank of the dense run), plus busy tok/s per backend: the figures of ``probes.figures`` up to the cursor."""
    tracks = list(frame.sessions.sessions.values())
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"x:{frame.x_mode} ", style="dim")
    shown = False
    bases: dict[int, float] = {}  # a dense session's peak, once per line (each is a pass over its samples)
    for tr in tracks:
        dense = frame.sessions.baseline_of(tr)
        if dense is None or tr is dense:
            continue
        if id(dense) not in bases:
            bases[id(dense)] = max_footprint(dense, frame.cursor_in(dense))
        base = bases[id(dense)]
        if not base:
            continue
        shown = True
        ratio = figures.footprint_ratio(max_footprint(tr, frame.cursor_in(tr)), base)
        ok = ratio <= frame.gate
        text.append(f"peak {tr.label}/dense ", style="bold")
        text.append_text(ratio_gauge(ratio, frame.gate))
        text.append(figures.format_ratio(ratio), style=OK_STYLE if ok else WARN_STYLE)
        text.append(f" (gate {frame.gate:.2f}x {'ok' if ok else 'EXCEEDED'})  ", style="dim" if ok else WARN_STYLE)
    if not shown:
        text.append("ratio: needs a dense session and a pool session  ", style="dim")
    text.append(figures.LABELS["tok_s:busy"] + " ", style="bold")
    for index, tr in enumerate(tracks):
        rate = figures.tok_s(tr, "busy", None, frame.cursor_in(tr))
        text.append(f"{tr.label} ", style=backend_colour(tr.label, index))
        text.append(figures.format_tok_s(rate) + "  ")
    return text


def chart_data(frame: ViewState) -> ChartData:
    """Every session's whole series in the frame's x mode (the cursor is a vertical line, so a replay shows where
    it stands in the run), its peak, and phase starts; times on the shared axis (ranks aligned to rank 0's clock).
    Each session's columns are cut at one row count, read once (``SampleColumns.window``): the ingest thread may be
    appending meanwhile."""
    data = ChartData(x_label=X_LABELS[frame.x_mode])
    for index, tr in enumerate(frame.sessions.sessions.values()):
        samples = tr.samples.window()
        xs = x_values(samples, frame.x_mode)
        xs = frame.sessions.shared_times(tr, xs) if frame.x_mode == "time" else xs
        fps = samples.footprint
        colour = backend_colour(tr.label, index)
        peak = None
        if fps:
            j = max(range(len(fps)), key=fps.__getitem__)
            peak = (xs[j], fps[j])
        data.series.append(Series(f"{tr.label} act+cache", xs, fps, colour, peak=peak))
        data.series.append(Series(f"{tr.label} RSS", xs, samples.rss, colour, secondary=True))
        if frame.x_mode == "time":
            data.phase_starts.extend(frame.sessions.shared_times(tr, [p.start for p in tr.phases()]))
        if frame.cursor is not None and data.cursor is None:
            k = tr.sample_index(frame.cursor_in(tr))
            data.cursor = frame.cursor if frame.x_mode == "time" else (xs[k - 1] if 0 < k <= len(xs) else None)
    return data


class MemoryView(Vertical):
    """The Memory tab."""

    def compose(self) -> ComposeResult:
        yield Static(id="ratio-line")
        yield MemoryChart(id="memory-chart")
        yield Lane(id="phase-lane")
        yield AccountingBar(id="accounting")

    def refresh_view(self, frame: ViewState) -> None:
        """Redraw from ``frame`` (called by the app's refresh timer while this tab is visible)."""
        counts = tuple((len(t.samples), len(t.events)) for t in frame.sessions.sessions.values())
        if unchanged(self, (frame_key(frame), counts, self.size)):
            return
        self.query_one("#ratio-line", Static).update(ratio_line(frame))
        self.query_one(MemoryChart).draw(chart_data(frame))
        self.query_one(Lane).show(frame.sessions.duration() or 1.0, self._phase_lanes(frame), frame.cursor)
        rows = [(tr.label, accounting(tr, tr.sample_index(frame.cursor_in(tr))))
                for tr in frame.sessions.sessions.values()]
        self.query_one(AccountingBar).show([r for r in rows if r[1]])
        self.border_subtitle = self._peak_caption(frame)

    @staticmethod
    def _phase_lanes(frame: ViewState) -> dict[str, list[tuple[float, str, str]]]:
        lanes: dict[str, list[tuple[float, str, str]]] = {}
        for index, tr in enumerate(frame.sessions.sessions.values()):
            colour = backend_colour(tr.label, index)
            shared = frame.sessions.to_shared  # a rank's times on rank 0's clock
            marks = []
            for p in tr.phases():  # a band over the phase's span, its name at the start
                start, end = shared(tr, p.start), shared(tr, p.end if p.end is not None else tr.duration)
                marks += [(start + (end - start) * k / BAND_POINTS, "━", colour) for k in range(BAND_POINTS + 1)]
                marks.append((start, "▌" + p.name + " ", f"bold {colour}"))
            peak = tr.peak().t
            if peak is not None:
                marks.append((shared(tr, peak), "▲", WARN_STYLE))
            lanes[tr.label] = marks
            finished = tr.events_of(RequestDone)
            if finished:  # when requests finished: memory falls when their rows are freed
                lanes[f"✓ {tr.label}"] = [(shared(tr, e.t), "│", colour) for e in finished]
            shrunk = tr.events_of(Shrunk)
            if shrunk:  # when shrink points gave slabs (and MLX's cache) back
                lanes[f"↓ {tr.label}"] = [(shared(tr, e.t), "▼", colour) for e in shrunk]
        return lanes

    @staticmethod
    def _peak_caption(frame: ViewState) -> str:
        parts = []
        for tr in frame.sessions.sessions.values():
            part = f"{tr.label} max since start {human_bytes(max_footprint(tr, frame.cursor_in(tr)))}"
            shrink = shrink_so_far(tr, frame.cursor_in(tr))
            if shrink.tally.events:  # what the footprint fell by across the shrink points (measured around each)
                part += f", reclaimed {human_bytes(shrink.tally.reclaimed_bytes)} ({shrink.tally.slabs_released} slabs)"
            parts.append(part)
        return " | ".join(parts)
