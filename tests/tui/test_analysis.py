"""White-box tests of the pure snapshot analysis (tiny hand-made layers, exact figures)."""

from __future__ import annotations

from tui_fixtures import SimPool, event_stream

from app.tui.analysis import (
    FREE, HELD, LIVE, SHARED, accounting, fragmentation_index, free_run_origin, free_runs, gather_runs,
    merged_gather_hist, next_request_need, pool_totals, row_state, runs_per_sequence, slab_cells,
)
from app.tui.data import Track


def layer(owners, refs, num_slabs, per=4):
    return {"num_slabs": num_slabs, "capacity_rows": num_slabs * per, "row_owner": owners, "row_refcount": refs}


SNAP = {"design": "slab", "slab_blocks": 4, "block_size": 16}


def test_row_state_covers_every_case():
    assert row_state(-1, 0) == FREE
    assert row_state(3, 0) == FREE  # refcount 0 wins over a stale owner
    assert row_state(-2, 1) == HELD
    assert row_state(5, 1) == LIVE
    assert row_state(5, 2) == SHARED


def test_slab_cells_count_rows_per_slab_and_unminted_capacity_is_free():
    lay = layer([1, 1, -1, 2, 2, -2], [1, 2, 0, 1, 1, 1], num_slabs=2)
    cells = slab_cells(SNAP, lay)
    assert [(c.live, c.shared, c.held, c.free) for c in cells] == [(2, 1, 0, 1), (1, 0, 1, 2)]
    assert cells[0].fraction == 0.75 and cells[1].fraction == 0.5


def test_free_runs_span_the_whole_capacity():
    lay = layer([1, -1, -1, 2, -1], [1, 0, 0, 1, 0], num_slabs=2)
    assert free_runs(lay) == [(1, 2), (4, 4)]  # rows 5-7 are reserved, never minted: free
    assert free_runs(layer([], [], 0)) == []


def test_gather_runs_split_on_slab_changes_only():
    assert gather_runs([0, 1, 2, 5, 6, 1], per_slab=4) == [(0, 3), (1, 2), (0, 1)]
    assert gather_runs([], per_slab=4) == []


def test_runs_per_sequence_slab_vs_monolithic():
    snap = dict(SNAP, layers=[layer([], [], 3)], seq_rows={"1": [0, 4, 8], "2": [1, 2]})
    assert runs_per_sequence(snap) == {1: 3, 2: 1}
    assert runs_per_sequence(dict(snap, design="monolithic")) == {1: 1, 2: 1}


def test_fragmentation_index_definition():
    assert fragmentation_index(0, 0) == 0.0
    assert fragmentation_index(8, 8) == 0.0
    assert fragmentation_index(8, 2) == 0.75


def test_pool_totals_and_merged_hist_from_sim_pool():
    pool = SimPool(num_layers=2, slab_blocks=4)
    pool.add(1, 3)
    pool.add(2, 3, share_from=1, shared=1)
    pool.gather_all()
    snap = pool.snapshot()
    totals = pool_totals(snap)
    # rows: 0 shared (seq1+seq2), 1-2 seq1, 3-4 seq2 -> 2 slabs per layer, 8 rows capacity per layer
    assert (totals.slabs, totals.live_rows, totals.shared_rows, totals.free_rows) == (4, 8, 2, 6)
    assert merged_gather_hist(snap) == {1: 2, 2: 2}
    assert next_request_need(snap) == 3


def test_accounting_uses_the_probes_split_and_keeps_negative_remainders():
    track = Track("slab")
    track.add({"kind": "sample", "t": 0.0, "active": 100, "cache": 10, "rss": 50, "weights": 60, "pool_live": 20,
               "pool_free": 5, "other_active": 15, "rss_other": -60})
    parts = {p.label: p.bytes for p in accounting(track, 1, None)}
    assert parts == {"weights": 60, "pool live": 20, "pool reserved-free": 5, "other active": 15, "MLX cache": 10,
                     "unexplained RSS": -60}
    assert accounting(track, 0, None) == []


def test_accounting_computed_from_snapshot_when_sample_lacks_split():
    track = Track("slab")
    track.add({"kind": "meta", "t": 0.0, "weight_bytes": 40})
    track.add({"kind": "sample", "t": 0.1, "active": 100, "cache": 10, "rss": 150})
    snap = {"stats": {"bytes_in_use": 30, "bytes_reserved": 50}}
    parts = [p.bytes for p in accounting(track, 1, snap)]
    assert parts == [40, 30, 20, 10, 10, 40]


def test_free_run_origin_names_the_releasing_sequence():
    track = Track("slab")
    for ev in event_stream("slab"):
        track.add(ev)
    # Sequence 1 held rows 1-2 (row 0 is shared with seq 2) and was released at step 8 (t = 4.0 s); step 13
    # gives row 1 back to seq 2 at step 9. At 4.0 s both are free.
    t, snap = track.snapshot_at(4.0)
    lay = snap["layers"][0]
    assert (1, 2) in free_runs(lay)
    origin = free_run_origin(track, 0, 1, 2, before=t)
    assert (origin.seq, origin.last_owned, origin.seen_free, origin.op, origin.op_t) == (1, 3.5, 4.0, "release", 4.0)
    assert origin.describe() == "freed by seq 1's release at 4.00s"
    never = free_run_origin(track, 0, 9, 3, before=t)  # rows 9-11: reserved capacity never minted
    assert never.seq is None and never.describe().startswith("never used")
