"""White-box tests of the snapshot analysis the views draw from (tiny hand-made layers, exact figures)."""

from __future__ import annotations

from tui_fixtures import SimPool, event_stream, sample

from app.tui.analysis import (
    accounting, free_run_origin, free_runs, gather_runs, merged_gather_hist, next_request_need, pool_totals,
    runs_per_sequence, slab_cells,
)
from pool import FusedDecision, LayerSnapshot, Owner, PoolCounters, PoolSnapshot, PoolStats
from probes.events import MetaUpdate
from probes.store import SessionModel


def layer(owners, refs, num_slabs, per=4):
    return LayerSnapshot(num_chunks=num_slabs, capacity_rows=num_slabs * per, free_rows=0, holes=0, largest_free_run=0,
                         fragmentation=0.0, gather_runs_hist={}, fused=FusedDecision(False, "-"), row_owner=owners,
                         row_refcount=refs)


def snap(layers, seq_rows=None, design="slab"):
    return PoolSnapshot(design=design, block_size=16, slab_blocks=4, num_layers=len(layers), dtype=None,
                        n_kv_heads=None, head_dim=None, bytes_per_row=0,
                        stats=PoolStats(0, 0, 0, 0, 0, 0, 0), counters=PoolCounters(), layers=layers,
                        seq_rows=seq_rows or {})


def test_slab_cells_count_rows_per_slab_and_unminted_capacity_is_free():
    lay = layer([1, 1, -1, 2, 2, -2], [1, 2, 0, 1, 1, 1], num_slabs=2)
    cells = slab_cells(snap([lay]), lay)
    assert [(c.live, c.shared, c.held, c.free) for c in cells] == [(2, 1, 0, 1), (1, 0, 1, 2)]
    assert cells[0].fraction == 0.75 and cells[1].fraction == 0.5


def test_caller_held_rows_are_not_drawn_as_live():
    """A restored block not yet adopted (owner Owner.CALLER) is held, by the caller: neither live nor free."""
    lay = layer([3, Owner.CALLER, Owner.CALLER, -1], [1, 1, 1, 0], num_slabs=1)
    cell = slab_cells(snap([lay]), lay)[0]
    assert (cell.live, cell.caller, cell.free) == (1, 2, 1)
    totals = pool_totals(snap([lay]))
    assert (totals.live_rows, totals.caller_rows, totals.free_rows) == (1, 2, 1)
    assert free_runs(lay) == [(3, 1)]


def test_free_runs_span_the_whole_capacity():
    lay = layer([1, -1, -1, 2, -1], [1, 0, 0, 1, 0], num_slabs=2)
    assert free_runs(lay) == [(1, 2), (4, 4)]  # rows 5-7 are reserved, never minted: free
    assert free_runs(layer([], [], 0)) == []


def test_gather_runs_split_on_slab_changes_only():
    assert gather_runs([0, 1, 2, 5, 6, 1], per_slab=4) == [(0, 3), (1, 2), (0, 1)]
    assert gather_runs([], per_slab=4) == []


def test_runs_per_sequence_slab_vs_monolithic():
    rows = {1: [0, 4, 8], 2: [1, 2]}
    assert runs_per_sequence(snap([layer([], [], 3)], rows)) == {1: 3, 2: 1}
    assert runs_per_sequence(snap([layer([], [], 3)], rows, design="monolithic")) == {1: 1, 2: 1}


def test_pool_totals_and_merged_hist_from_sim_pool():
    pool = SimPool(num_layers=2, slab_blocks=4)
    pool.add(1, 3)
    pool.add(2, 3, share_from=1, shared=1)
    pool.gather_all()
    shot = pool.snapshot()
    totals = pool_totals(shot)
    # rows: 0 shared (seq1+seq2), 1-2 seq1, 3-4 seq2 -> 2 slabs per layer, 8 rows capacity per layer
    assert (totals.slabs, totals.live_rows, totals.shared_rows, totals.free_rows) == (4, 8, 2, 6)
    assert merged_gather_hist(shot) == {1: 2, 2: 2}
    assert next_request_need(shot) == 3


def test_accounting_uses_the_probes_split_and_keeps_negative_remainders():
    model = SessionModel("slab")
    model.append(MetaUpdate(t=0.0, meta={"t_start": 0.0}))
    model.append(sample(0.0, 0, 0, active=100, cache=10, rss=50, weights=60, pool_live=20, pool_free=5,
                        other_active=15, rss_other=-60))
    parts = {p.label: p.bytes for p in accounting(model, 1)}
    assert parts == {"weights": 60, "pool live": 20, "pool reserved-free": 5, "other active": 15, "MLX cache": 10,
                     "unexplained RSS": -60}
    assert accounting(model, 0) == []


def test_free_run_origin_names_the_releasing_sequence():
    model = SessionModel("slab")
    for ev in event_stream("slab"):
        model.append(ev)
    # Sequence 1 held rows 1-2 (row 0 is shared with seq 2) and was released at step 8 (t = 4.0 s); step 13
    # gives row 1 back to seq 2 at step 9. At 4.0 s both are free.
    shot = model.snapshot_at(4.0)
    assert (1, 2) in free_runs(shot.layers[0])
    origin = free_run_origin(model, 0, 1, 2, before=4.0)
    assert (origin.seq, origin.last_owned, origin.seen_free, origin.op, origin.op_t) == (1, 3.5, 4.0, "release", 4.0)
    assert origin.describe() == "freed by seq 1's release at 4.00s"
    never = free_run_origin(model, 0, 9, 3, before=4.0)  # rows 9-11: reserved capacity never minted
    assert never.seq is None and never.describe().startswith("never used")
