"""Memory view: the whole-run verdict (footprint ratio to dense against the gate, tok/s: what ``compare`` prints) and
the same figures at the cursor; footprint and RSS per backend, phase lines and names, peak markers, when a server's
requests arrived, when requests finished and when shrink points gave memory back (with the bytes reclaimed), and
the accounting stack at the cursor."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from app.tui.analysis import accounting, shrink_so_far
from app.tui.data import ViewState
from app.tui.views import frame_key, unchanged
from app.tui.widgets.accounting_bar import AccountingBar
from app.tui.widgets.lane import Lane
from app.tui.widgets.memory_chart import ChartData, MemoryChart, Series
from app.tui.views.memory_header import cursor_line, verdict_line
from app.tui.widgets.palette import HIGHLIGHT_STYLE, backend_colour, human_bytes
from probes import figures
from probes.events import RequestArrived, RequestDone, Shrunk
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
        yield Static(id="verdict-line")
        yield Static(id="cursor-line")
        yield MemoryChart(id="memory-chart")
        yield Lane(id="phase-lane")
        yield AccountingBar(id="accounting")

    def refresh_view(self, frame: ViewState) -> None:
        """Redraw from ``frame`` (called by the app's refresh timer while this tab is visible)."""
        counts = tuple((len(t.samples), len(t.events)) for t in frame.sessions.sessions.values())
        if unchanged(self, (frame_key(frame), counts, self.size)):
            return
        self.query_one("#verdict-line", Static).update(verdict_line(frame, self.size.width))
        self.query_one("#cursor-line", Static).update(cursor_line(frame))
        self.query_one(MemoryChart).draw(chart_data(frame))
        detail = self.app.size.height >= 32  # a short terminal: the phase lanes only, the chart keeps its rows
        self.query_one(Lane).show(frame.sessions.duration() or 1.0, self._phase_lanes(frame, detail), frame.cursor)
        rows = [(tr.label, accounting(tr, tr.sample_index(frame.cursor_in(tr))))
                for tr in frame.sessions.sessions.values()]
        self.query_one(AccountingBar).show([r for r in rows if r[1]])
        self.border_subtitle = self._peak_caption(frame)

    @staticmethod
    def _phase_lanes(frame: ViewState, detail: bool = True) -> dict[str, list[tuple[float, str, str]]]:
        """Per session its phase bands and peak; with ``detail``, then lanes of finished requests and shrink points
        (every session's phase lane comes first: a short lane box cuts the details, never a session)."""
        lanes: dict[str, list[tuple[float, str, str]]] = {}
        details: dict[str, list[tuple[float, str, str]]] = {}
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
                marks.append((shared(tr, peak), "▲", f"{HIGHLIGHT_STYLE} {colour}"))
            lanes[tr.label] = marks
            if not detail:
                continue
            arrived = tr.events_of(RequestArrived)
            if arrived:  # a server's requests as they arrive (slabscope serve)
                details[f"→ {tr.label}"] = [(shared(tr, e.t), "│", colour) for e in arrived]
            finished = tr.events_of(RequestDone)
            if finished:  # when requests finished: memory falls when their rows are freed
                details[f"✓ {tr.label}"] = [(shared(tr, e.t), "│", colour) for e in finished]
            shrunk = tr.events_of(Shrunk)
            if shrunk:  # when shrink points gave slabs (and MLX's cache) back
                details[f"↓ {tr.label}"] = [(shared(tr, e.t), "▼", colour) for e in shrunk]
        return {**lanes, **details}

    @staticmethod
    def _peak_caption(frame: ViewState) -> str:
        parts = []
        for tr in frame.sessions.sessions.values():
            part = f"at cursor: {tr.label} max since start {human_bytes(max_footprint(tr, frame.cursor_in(tr)))}"
            shrink = shrink_so_far(tr, frame.cursor_in(tr))
            if shrink.tally.events:  # what the footprint fell by across the shrink points (measured around each)
                part += f", reclaimed {human_bytes(shrink.tally.reclaimed_bytes)} ({shrink.tally.slabs_released} slabs)"
            parts.append(part)
        return " | ".join(parts)
