"""The figures the views compute from a snapshot or a session, as plain functions with exact answers: the
Fragmentation view's index per layer, the layers a next request does not fit and the worst index; the Memory view's
peak marks (chart and phase lane) from max(active + cache), never from RSS; the Gather view's worst bucket, sequence
and lane point. Golden SVGs (tests/tui/test_snapshots.py) show the same figures, but ``--snapshot-update`` would
accept a regression there without a word; these fail."""

from __future__ import annotations

from tui_fixtures import sample

from app.tui.data import SessionSet, ViewState
from app.tui.views.fragmentation import fragmentation_figures
from app.tui.views.gather import worst_cases
from app.tui.views.memory import MemoryView, chart_data
from pool import FusedDecision, LayerSnapshot
from probes.events import MetaUpdate, PhaseEdge


def _layer(free_rows: int, holes: int, largest: int) -> LayerSnapshot:
    frag = 1 - largest / free_rows if free_rows else 0.0
    return LayerSnapshot(num_chunks=4, capacity_rows=64, free_rows=free_rows, holes=holes, largest_free_run=largest,
                         fragmentation=frag, gather_runs_hist={}, fused=FusedDecision(False, "-"))


def test_fragmentation_index_fit_and_worst_per_layer():
    """Index = 1 - largest free run / free rows (0.3 with 10 free rows in 2 holes, the largest 7; 0.75 with 4
    single-row holes; 0 with none free): not a figure of the holes count. A request of 5 blocks fits only the
    first layer; the worst index is the largest one."""
    layers = [_layer(10, 2, 7), _layer(4, 4, 1), _layer(0, 0, 0)]
    per_layer, short, worst = fragmentation_figures(layers, need=5)
    assert per_layer == [(1 - 7 / 10, 7, True), (0.75, 1, False), (0.0, 0, False)]
    assert short == 2 and worst == 0.75
    assert fragmentation_figures(layers, need=1)[1] == 1  # only the layer with nothing free is short
    assert fragmentation_figures([], need=5) == ([], 0, 0.0)


def _session_set() -> SessionSet:
    """One session whose max(active + cache) is at 2.0 s (100 MB + 20 MB) while its RSS peaks later, at 3.0 s."""
    sessions = SessionSet()
    model = sessions.session("slab")
    model.append(MetaUpdate(t=0.0, meta={"t_start": 0.0, "backend": "slab"}))
    model.append(PhaseEdge(name="p", edge="start", t=0.5))
    for t, active, cache, rss in ((1.0, 60e6, 10e6, 200e6), (2.0, 100e6, 20e6, 210e6), (3.0, 50e6, 5e6, 400e6)):
        model.append(sample(t, int(t), int(t) * 10, active=active, cache=cache, rss=rss))
    return sessions


def test_memory_peak_marks_come_from_active_plus_cache_not_rss():
    frame = ViewState(_session_set(), cursor=None)
    series = {s.label: s for s in chart_data(frame).series}
    assert series["slab act+cache"].peak == (2.0, 120e6)
    assert series["slab RSS"].peak is None and max(series["slab RSS"].ys) == 400e6  # RSS peaks elsewhere
    marks = MemoryView._phase_lanes(frame)["slab"]
    assert [t for t, mark, _style in marks if mark == "▲"] == [2.0]


def test_gather_worst_cases_are_the_largest():
    hist = {1: 5, 3: 2, 2: 7}  # the worst bucket is the most runs per gather (3), not the most frequent (2)
    per_seq = {4: 2, 7: 5, 9: 1}
    history = [(0.5, 1, 2), (1.0, 2, 6), (1.5, 3, 6), (2.0, 4, 1)]
    assert worst_cases(hist, per_seq, history) == (3, 7, (1.0, 2, 6))  # the earliest of the tied points
    assert worst_cases({}, {}, []) == (None, None, None)
