"""Memory view: footprint and RSS per backend, phase lines and names, peak markers, the slab/dense ratio against the
gate, tok/s per backend, and the accounting stack at the cursor."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from app.tui.analysis import accounting
from app.tui.views import frame_key, unchanged
from app.tui.data import Frame, Track
from app.tui.widgets.accounting_bar import AccountingBar
from app.tui.widgets.lane import Lane
from app.tui.widgets.memory_chart import ChartData, MemoryChart, Series
from app.tui.widgets.palette import OK_STYLE, WARN_STYLE, backend_colour, human_bytes

X_LABELS = {"time": "time (s)", "step": "step", "tokens": "tokens"}
BAND_POINTS = 240  # marks per phase band in the phase lane (more than any terminal is wide)


def x_values(track: Track, mode: str, n: int) -> list[float]:
    """The first ``n`` samples' x values in the chosen mode."""
    s = track.samples
    if mode == "step":
        return [float(v) for v in s.step[:n]]
    if mode == "tokens":
        return [float(v) for v in s.tokens[:n]]
    return s.t[:n]


def decode_tok_s(track: Track, cursor: float | None) -> float | None:
    """Decode throughput up to the cursor: decode tokens / decode wall time (None before the first decode)."""
    tokens = wall = 0.0
    for st in track.steps:
        if cursor is not None and st.t > cursor:
            break
        if st.type == "decode":
            tokens += st.num_tokens or st.batch
            wall += st.wall_s
    return tokens / wall if wall > 0 else None


def max_footprint(track: Track, cursor: float | None) -> float:
    """max(active + cache) over samples up to the cursor."""
    n = track.sample_index(cursor)
    return max(track.samples.footprint[:n], default=0.0)


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


def ratio_line(frame: Frame) -> Text:
    """'slab/dense 1.02x (gate 1.15x) ok' for each pool track against the dense track, plus tok/s per backend."""
    tracks = list(frame.store.tracks.values())
    dense = next((t for t in tracks if t.name.startswith("dense")), None)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"x:{frame.x_mode} ", style="dim")
    base = max_footprint(dense, frame.cursor) if dense else 0.0
    for tr in tracks:
        if tr is dense or not base:
            continue
        ratio = max_footprint(tr, frame.cursor) / base
        ok = ratio <= frame.gate
        text.append(f"peak {tr.name}/dense ", style="bold")
        text.append_text(ratio_gauge(ratio, frame.gate))
        text.append(f"{ratio:.2f}x", style=OK_STYLE if ok else WARN_STYLE)
        text.append(f" (gate {frame.gate:.2f}x {'ok' if ok else 'EXCEEDED'})  ", style="dim" if ok else WARN_STYLE)
    if not base:
        text.append("ratio: needs a dense track and a pool track  ", style="dim")
    text.append("tok/s ", style="bold")
    for index, tr in enumerate(tracks):
        rate = decode_tok_s(tr, frame.cursor)
        text.append(f"{tr.name} ", style=backend_colour(tr.name, index))
        text.append("-  " if rate is None else f"{rate:.1f}  ")
    return text


def chart_data(frame: Frame) -> ChartData:
    """Every track's whole series in the frame's x mode (the cursor is a vertical line, so a replay shows where it
    stands in the run), its peak, and phase starts."""
    data = ChartData(x_label=X_LABELS[frame.x_mode])
    for index, tr in enumerate(frame.store.tracks.values()):
        n = len(tr.samples)
        xs = x_values(tr, frame.x_mode, n)
        fps = tr.samples.footprint[:n]
        colour = backend_colour(tr.name, index)
        peak = None
        if fps:
            j = max(range(n), key=fps.__getitem__)
            peak = (xs[j], fps[j])
        data.series.append(Series(f"{tr.name} act+cache", xs, fps, colour, peak=peak))
        data.series.append(Series(f"{tr.name} RSS", xs, tr.samples.rss[:n], colour, secondary=True))
        if frame.x_mode == "time":
            data.phase_starts.extend(p.start for p in tr.phases)
        if frame.cursor is not None and data.cursor is None:
            k = tr.sample_index(frame.cursor)
            data.cursor = frame.cursor if frame.x_mode == "time" else (xs[k - 1] if k else None)
    return data


class MemoryView(Vertical):
    """The Memory tab."""

    def compose(self) -> ComposeResult:
        yield Static(id="ratio-line")
        yield MemoryChart(id="memory-chart")
        yield Lane(id="phase-lane")
        yield AccountingBar(id="accounting")

    def refresh_view(self, frame: Frame) -> None:
        """Redraw from ``frame`` (called by the app's refresh timer while this tab is visible)."""
        counts = tuple((len(t.samples), len(t.steps), len(t.phases)) for t in frame.store.tracks.values())
        if unchanged(self, (frame_key(frame), counts, self.size)):
            return
        self.query_one("#ratio-line", Static).update(ratio_line(frame))
        self.query_one(MemoryChart).draw(chart_data(frame))
        self.query_one(Lane).show(frame.store.duration() or 1.0, self._phase_lanes(frame), frame.cursor)
        rows = []
        for tr in frame.store.tracks.values():
            snap = tr.snapshot_at(frame.cursor)
            rows.append((tr.name, accounting(tr, tr.sample_index(frame.cursor), snap[1] if snap else None)))
        self.query_one(AccountingBar).show([r for r in rows if r[1]])
        self.border_subtitle = self._peak_caption(frame)

    @staticmethod
    def _phase_lanes(frame: Frame) -> dict[str, list[tuple[float, str, str]]]:
        lanes: dict[str, list[tuple[float, str, str]]] = {}
        for index, tr in enumerate(frame.store.tracks.values()):
            colour = backend_colour(tr.name, index)
            marks = []
            for p in tr.phases:  # a band over the phase's span, its name at the start
                end = p.end if p.end is not None else tr.duration
                marks += [(p.start + (end - p.start) * k / BAND_POINTS, "━", colour) for k in range(BAND_POINTS + 1)]
                marks.append((p.start, "▌" + p.name + " ", f"bold {colour}"))
            peak = tr.peak_time()
            if peak is not None:
                marks.append((peak, "▲", WARN_STYLE))
            lanes[tr.name] = marks
        return lanes

    @staticmethod
    def _peak_caption(frame: Frame) -> str:
        parts = []
        for tr in frame.store.tracks.values():
            parts.append(f"{tr.name} max since start {human_bytes(max_footprint(tr, frame.cursor))}")
        return " | ".join(parts)
