"""Gather runs view: the histogram of same-slab runs per sequence per decode step up to the cursor (the figure
``probes.figures.gather_runs`` defines: its mean and maximum are the "gather runs mean/max" every surface prints),
runs each sequence's next gather takes at the cursor, and the worst sequence per decode step over the run."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from app.tui.analysis import runs_per_sequence
from app.tui.data import ViewState
from app.tui.views import frame_key, unchanged
from app.tui.widgets.hbars import HBars
from app.tui.widgets.lane import Lane
from app.tui.widgets.glossary_link import glossary_link
from app.tui.widgets.palette import HIGHLIGHT_STYLE, seq_colour
from probes import figures
from probes.store import SessionModel

LANE_POINTS = 160  # points of the worst-case lane


def worst_runs_over_time(model: SessionModel, cursor: float | None) -> list[tuple[float, int, int]]:
    """(t, step, runs of the worst sequence) per decode step up to the cursor (``probes.figures``: the steps behind
    the histogram), at most LANE_POINTS points: consecutive steps bucketed, each bucket kept as its worst step, so
    the lane's worst is the histogram's largest bar."""
    steps = figures.worst_runs_per_step(model, None, cursor)
    if len(steps) <= LANE_POINTS:
        return steps
    size = len(steps) / LANE_POINTS
    return [max(steps[int(k * size):max(int((k + 1) * size), int(k * size) + 1)], key=lambda s: s[2])
            for k in range(LANE_POINTS)]


@dataclass
class GatherPicture:
    """What the Gather tab shows of a session up to the cursor: the figure, the worst-case lane, its header."""

    runs: figures.RunsFigure | None
    history: list[tuple[float, int, int]]
    peak: tuple[float, int, int] | None
    text: Text


def gather_picture(track: SessionModel, shown_at: float, cursor: float | None) -> GatherPicture:
    """The gather runs figure up to ``cursor`` (``probes.figures.gather_runs``), the worst step per lane point, and
    the header line naming both ("gather runs mean/max up to here 4.97/5 ... worst: 5 runs at step 70")."""
    runs = figures.gather_runs(track, None, cursor)
    history = worst_runs_over_time(track, cursor)
    _bucket, _seq, peak = worst_cases(runs.hist if runs else {}, {}, history)
    text = Text(f"{track.label} @ {shown_at:.1f}s  ", style="bold")
    text.append_text(glossary_link("gather"))  # before the figures: a wrap moves their words, never the link
    text.append(f"  {figures.LABELS['gather_runs']} up to here {figures.format_runs(runs)} over "
                f"{runs.pairs if runs else 0} (step, sequence) pairs  ", style="bold")
    if peak and peak[2]:
        where = f"step {peak[1]} ({peak[0]:.1f}s)" if peak[1] >= 0 else f"{peak[0]:.1f}s"
        text.append(f"worst: {peak[2]} runs at {where}", style=HIGHLIGHT_STYLE)  # the worst case, not a failure
    return GatherPicture(runs, history, peak, text)


def worst_cases(hist: dict[int, int], per_seq: dict[int, int], history: list[tuple[float, int, int]]):
    """The worst of each figure the view highlights: the largest runs-per-gather bucket, the sequence whose rows
    take the most runs, and the lane's point (t, step, runs) with the most runs (the earliest on a tie); None
    where there is nothing."""
    bucket = max(hist) if hist else None
    seq = max(per_seq, key=per_seq.get) if per_seq else None
    peak = max(history, key=lambda h: h[2], default=None)
    return bucket, seq, peak


class GatherView(Vertical):
    """The Gather runs tab."""

    def compose(self) -> ComposeResult:
        yield Static(id="gather-summary")
        with Horizontal():
            with VerticalScroll(id="gather-hist-box"):
                yield HBars(id="gather-hist")
            with VerticalScroll(id="gather-seq-box"):
                yield HBars(id="gather-seqs")
        yield Lane(id="gather-lane")

    def refresh_view(self, frame: ViewState) -> None:
        """Redraw the histograms and the worst-case lane for the chosen pool session at the cursor."""
        track, found = frame.pool_session(), frame.snapshot()
        if unchanged(self, (frame_key(frame), id(found[1]) if found else None, self.size)):
            return
        summary = self.query_one("#gather-summary", Static)
        if track is None or found is None:
            summary.update(Text("no pool snapshot yet", style="dim"))
            return
        snap = found[1]
        cursor = frame.cursor_in(track)  # the histogram and the lane are in the session's own seconds
        picture = gather_picture(track, found[0], cursor)
        runs, per_seq = picture.runs, runs_per_sequence(snap)
        worst_bucket, worst_seq, peak = worst_cases(runs.hist if runs else {}, per_seq, picture.history)
        self.query_one("#gather-hist", HBars).show(
            "runs per sequence per decode step (count)", [(str(k), v) for k, v in (runs.hist if runs else {}).items()],
            str(worst_bucket) if worst_bucket is not None else None)
        self.query_one("#gather-seqs", HBars).show(
            "runs per sequence now", [(f"seq {s}", r) for s, r in sorted(per_seq.items())],
            f"seq {worst_seq}" if worst_seq is not None else None, colour=seq_colour(worst_seq or 0))
        marks = [(t, str(min(9, r)), HIGHLIGHT_STYLE if peak and r == peak[2] else "dim")
                 for t, _s, r in picture.history]
        self.query_one(Lane).show(track.duration or 1.0, {"max run": marks}, cursor)
        summary.update(picture.text)
