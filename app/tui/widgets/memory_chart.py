"""MemoryChart: footprint (max(active+cache) sampled) and RSS per backend over time, step or tokens.

A textual-plot ``PlotWidget`` redrawn from plain series at each refresh: solid braille lines for the footprint,
half-block lines for RSS, a ``▲`` at each backend's peak footprint, dim vertical lines at phase starts and a bright
one at the replay cursor. Series are decimated to about two points per column so a long run redraws cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.binding import Binding
from textual_plot import HiResMode, LegendLocation, PlotWidget

MIB = 1024 * 1024


@dataclass
class Series:
    """One line: label, x values, y values in bytes, colour, and whether it is the dashed/secondary kind."""

    label: str
    xs: list[float]
    ys: list[float]
    colour: str
    secondary: bool = False
    peak: tuple[float, float] | None = None  # (x, bytes) marker


@dataclass
class ChartData:
    """Everything one redraw needs."""

    series: list[Series] = field(default_factory=list)
    phase_starts: list[float] = field(default_factory=list)
    cursor: float | None = None
    x_label: str = "time (s)"


def decimate(xs: list[float], ys: list[float], max_points: int) -> tuple[list[float], list[float]]:
    """Keep at most ``max_points`` points, always keeping each bucket's maximum (peaks must survive)."""
    n = len(xs)
    if n <= max_points or max_points < 2:
        return xs, ys
    bucket = n / max_points
    out_x: list[float] = []
    out_y: list[float] = []
    for b in range(max_points):
        lo, hi = int(b * bucket), min(n, int((b + 1) * bucket))
        if lo >= hi:
            continue
        j = max(range(lo, hi), key=ys.__getitem__)
        out_x.append(xs[j])
        out_y.append(ys[j])
    return out_x, out_y


class MemoryChart(PlotWidget):
    """The memory timeline. ``draw`` replaces the whole picture. Its zoom and pan keys stay out of the footer (the
    help screen lists them), which keeps the app's own keys readable at 80 columns."""

    BINDINGS = [Binding(key, action, text, show=False) for key, action, text in (
        ("+", "zoom_in", "zoom in"), ("-", "zoom_out", "zoom out"), ("left", "pan_left", "pan left"),
        ("right", "pan_right", "pan right"), ("up", "pan_up", "pan up"), ("down", "pan_down", "pan down"),
        ("r", "reset_scales", "reset scales"))]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, allow_pan_and_zoom=True)
        self.last: ChartData | None = None

    def on_mount(self) -> None:
        super().on_mount()
        self.margin_top = 1
        self.margin_bottom = 3  # tick labels, then the axis's name and unit ("time (s)")
        self.margin_left = 8
        self.set_ylabel("MiB")
        self.show_legend(LegendLocation.BOTTOMRIGHT)

    def draw(self, data: ChartData) -> None:
        """Redraw from ``data`` (lines, peaks, phase lines, cursor)."""
        self.last = data
        self.clear()
        self.set_xlabel(data.x_label)
        width = max(20, self.size.width * 2)
        for x in data.phase_starts:
            self.add_v_line(x, line_style="dim")
        for s in data.series:
            if not s.xs:
                continue
            xs, ys = decimate(s.xs, s.ys, width)
            mode = HiResMode.HALFBLOCK if s.secondary else HiResMode.BRAILLE
            self.plot(xs, [y / MIB for y in ys], line_style=s.colour, hires_mode=mode, label=s.label)
            if s.peak is not None:
                self.scatter([s.peak[0]], [s.peak[1] / MIB], marker="▲", marker_style=f"bold {s.colour}")
        if data.cursor is not None:
            self.add_v_line(data.cursor, line_style="bold reverse")
        top = max((max(s.ys) for s in data.series if s.ys), default=0.0) / MIB
        self.set_ylimits(0, top * 1.1 if top > 0 else None)  # headroom: peak markers stay off the frame
