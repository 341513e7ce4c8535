"""Gather runs view: the pool's histogram of runs per gather (over all layers), runs each sequence's next gather
takes at the cursor, and the worst sequence per decode step over the run (highlighted)."""

from __future__ import annotations

import bisect
import weakref

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from app.tui.analysis import merged_gather_hist, runs_per_sequence
from app.tui.data import ViewState
from app.tui.views import frame_key, unchanged
from app.tui.widgets.hbars import HBars
from app.tui.widgets.lane import Lane
from app.tui.widgets.glossary_link import glossary_link
from app.tui.widgets.palette import HIGHLIGHT_STYLE, seq_colour
from pool.gather_runs import mean_runs
from probes.events import GatherRuns
from probes.store import SessionModel

LANE_POINTS = 160  # points of the worst-case lane
_WORST_FROM_SNAPSHOTS: "weakref.WeakKeyDictionary[SessionModel, dict[float, int]]" = weakref.WeakKeyDictionary()


def worst_runs_over_time(model: SessionModel, cursor: float | None) -> list[tuple[float, int, int]]:
    """(t, step, runs of the worst sequence) over the run up to the cursor, at most LANE_POINTS points: from the
    decode steps' measured gather runs (``GatherRuns``: the maximum over layers) when the run reports them, else
    from the sequences' rows in snapshots spread over the run (rebuilt once per snapshot, then cached)."""
    steps = model.events_of(GatherRuns)
    if steps:
        seen = steps if cursor is None else steps[:bisect.bisect_right(steps, cursor, key=lambda e: e.t)]
        stride = max(1, len(seen) // LANE_POINTS)
        picked = list(seen[::stride]) + ([seen[-1]] if seen and (len(seen) - 1) % stride else [])
        return [(e.t, e.step, max(e.runs_max, default=0)) for e in picked]
    cache = _WORST_FROM_SNAPSHOTS.setdefault(model, {})
    out = []
    for record in model.history(None, limit=-LANE_POINTS):
        if cursor is not None and record.t > cursor:
            break
        if record.t not in cache:
            full = model.snapshot_at(record.t)
            cache[record.t] = max(runs_per_sequence(full).values(), default=0) if full is not None else 0
        out.append((record.t, record.step, cache[record.t]))
    return out


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
        hist, per_seq = merged_gather_hist(snap), runs_per_sequence(snap)
        cursor = frame.cursor_in(track)  # the lane is in the session's own seconds
        history = worst_runs_over_time(track, cursor)
        worst_bucket, worst_seq, peak = worst_cases(hist, per_seq, history)
        self.query_one("#gather-hist", HBars).show(
            "runs per gather (count, all layers)", [(str(k), v) for k, v in sorted(hist.items())],
            str(worst_bucket) if worst_bucket is not None else None)
        self.query_one("#gather-seqs", HBars).show(
            "runs per sequence now", [(f"seq {s}", r) for s, r in sorted(per_seq.items())],
            f"seq {worst_seq}" if worst_seq is not None else None, colour=seq_colour(worst_seq or 0))
        marks = [(t, str(min(9, r)), HIGHLIGHT_STYLE if peak and r == peak[2] else "dim") for t, _s, r in history]
        self.query_one(Lane).show(track.duration or 1.0, {"max run": marks}, cursor)
        total = sum(hist.values())
        mean = mean_runs(hist) or 0.0
        text = Text(f"{track.label} @ {found[0]:.1f}s  gathers {total}  mean runs {mean:.2f}  ", style="bold")
        if peak:
            text.append(f"worst: {peak[2]} runs at step {peak[1]} ({peak[0]:.1f}s)  ", style=HIGHLIGHT_STYLE)
        text.append_text(glossary_link("gather"))
        summary.update(text)
