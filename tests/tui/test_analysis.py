"""White-box tests of the snapshot analysis the views draw from (tiny hand-made layers, exact figures)."""

from __future__ import annotations

from typing import NamedTuple

from msgspec.structs import replace
from tui_fixtures import SimPool, event_stream, sample

from app.tui.analysis import (
    HISTORY_LIMIT, accounting, free_run_origin, free_runs, gather_runs, next_request_need,
    pool_totals, rows_per_slab, runs_per_sequence, shrink_so_far, slab_cells,
)
from app.tui.views.occupancy import totals_text
from pool import FusedDecision, LayerSnapshot, Owner, PoolCounters, PoolSnapshot, PoolStats
from pool.ops import BlockMove, Release
from pool.shrink_types import ShrinkReport
from probes.events import MetaUpdate, OpBatch, Shrunk, SnapshotTaken
from probes.store import SessionModel


class Layer(NamedTuple):
    """A hand-made layer entry and the rows it holds (a snapshot holds the rows once: ``snap`` takes them from its
    first layer)."""

    entry: LayerSnapshot
    owners: list
    refs: list


def layer(owners, refs, num_slabs, per=4) -> Layer:
    return Layer(LayerSnapshot(num_chunks=num_slabs, capacity_rows=num_slabs * per, free_rows=0, holes=0,
                               largest_free_run=0, fragmentation=0.0, gather_runs_hist={},
                               fused=FusedDecision(False, "-")), owners, refs)


def snap(layers, seq_rows=None, design="slab"):
    return PoolSnapshot(design=design, block_size=16, slab_blocks=4, num_layers=len(layers), dtype=None,
                        n_kv_heads=None, head_dim=None, bytes_per_row=0,
                        stats=PoolStats(0, 0, 0, 0, 0, 0, 0), counters=PoolCounters(),
                        layers=[lay.entry for lay in layers], seq_rows=seq_rows or {},
                        row_owner=layers[0].owners if layers else [], row_refcount=layers[0].refs if layers else [])


def test_slab_cells_count_rows_per_slab_and_unminted_capacity_is_free():
    shot = snap([layer([1, 1, -1, 2, 2, -2], [1, 2, 0, 1, 1, 1], num_slabs=2)])
    cells = slab_cells(shot, shot.layers[0])
    assert [(c.live, c.shared, c.held, c.free) for c in cells] == [(2, 1, 0, 1), (1, 0, 1, 2)]
    assert cells[0].fraction == 0.75 and cells[1].fraction == 0.5


def test_rows_an_older_recording_says_a_caller_held_are_drawn_as_held():
    """A block restored by a caller and not yet adopted (owner -3 in recordings made before the restore path went)
    is held: neither live nor free; and every layer of a snapshot holds its rows (totals count them per layer)."""
    shot = snap([layer([3, -3, -3, -1], [1, 1, 1, 0], num_slabs=1)] * 2)
    cell = slab_cells(shot, shot.layers[1])[0]
    assert (cell.live, cell.held, cell.free) == (1, 2, 1)
    totals = pool_totals(shot)
    assert (totals.slabs, totals.live_rows, totals.held_rows, totals.free_rows) == (2, 2, 4, 2)
    assert free_runs(shot) == [(3, 1)]


def test_free_runs_span_the_whole_capacity():
    shot = snap([layer([1, -1, -1, 2, -1], [1, 0, 0, 1, 0], num_slabs=2)])
    assert free_runs(shot) == [(1, 2), (4, 4)]  # rows 5-7 are reserved, never minted: free
    assert free_runs(snap([layer([], [], 0)])) == []


def test_gather_runs_split_on_slab_changes_only():
    assert gather_runs([0, 1, 2, 5, 6, 1], per_slab=4) == [(0, 3), (1, 2), (0, 1)]
    assert gather_runs([], per_slab=4) == []


def test_runs_per_sequence_slab_vs_monolithic():
    rows = {1: [0, 4, 8], 2: [1, 2]}
    assert runs_per_sequence(snap([layer([], [], 3)], rows)) == {1: 3, 2: 1}
    assert runs_per_sequence(snap([layer([], [], 3)], rows, design="monolithic")) == {1: 1, 2: 1}


def test_pool_totals_from_sim_pool():
    pool = SimPool(num_layers=2, slab_blocks=4)
    pool.add(1, 3)
    pool.add(2, 3, share_from=1, shared=1)
    pool.gather_all()
    shot = pool.snapshot()
    totals = pool_totals(shot)
    # rows: 0 shared (seq1+seq2), 1-2 seq1, 3-4 seq2 -> 2 slabs per layer, 8 rows capacity per layer
    assert (totals.slabs, totals.live_rows, totals.shared_rows, totals.free_rows) == (4, 8, 2, 6)
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
    assert (1, 2) in free_runs(shot)
    origin = free_run_origin(model, 0, 1, 2, before=4.0)
    assert (origin.seq, origin.last_owned, origin.seen_free, origin.op, origin.op_t) == (1, 3.5, 4.0, "release", 4.0)
    assert origin.describe() == "freed by seq 1's release at 4.00s"
    never = free_run_origin(model, 0, 9, 3, before=4.0)  # rows 9-11: reserved capacity never minted
    assert never.seq is None and never.describe().startswith("never used")


# ---- figures the views print (issue 10: surviving mutants of app/tui/analysis.py at 550bf32) ---------------------

def model_of(*items, meta=None, max_keyframes=360):
    """A session from hand-made items: (t, snapshot) pairs become keyframe snapshots, (t, [ops]) op batches."""
    model = SessionModel("slab", max_keyframes=max_keyframes)
    model.append(MetaUpdate(t=0.0, meta={"t_start": 0.0, **(meta or {})}))
    for t, item in items:
        if isinstance(item, PoolSnapshot):
            model.append(SnapshotTaken(t=t, step=0, tokens=0, snapshot=item, keyframe=True))
        else:
            model.append(OpBatch(t=t, step=0, tokens=0, ops=item, op_t=[t] * len(item)))
    return model


def test_every_row_of_a_state_is_counted_and_rows_past_the_reserved_slabs_get_their_own_cells():
    """Two shared and two handle-held rows in one slab; row arrays longer than ``num_chunks`` slabs (slabs 1
    and 4 past them) grow the grid by exactly the slabs they reach instead of being dropped. The Slabs view's
    totals line prints them."""
    lay = layer([1, 1, Owner.HANDLE, Owner.HANDLE, -1, 4, -1, -1] + [-1] * 8 + [5, 5],
                [2, 2, 1, 1, 0, 1, 0, 0] + [0] * 8 + [1, 1], num_slabs=1)
    shot = replace(snap([lay]), stats=PoolStats(5, 5, 3, 12 * 1024, 7 * 1024, 2, 1))
    cells = slab_cells(shot, lay.entry)
    assert [(c.capacity, c.live, c.shared, c.held, c.free) for c in cells] == [
        (4, 0, 2, 2, 0), (4, 1, 0, 0, 3), (4, 0, 0, 0, 4), (4, 0, 0, 0, 4), (4, 2, 0, 0, 2)]
    totals = pool_totals(shot)
    assert (totals.slabs, totals.live_rows, totals.shared_rows, totals.held_rows, totals.free_rows) == (5, 3, 2, 2, 13)
    assert (totals.bytes_reserved, totals.bytes_in_use) == (12 * 1024, 7 * 1024)
    line = totals_text("slab", 1.0, shot).plain
    assert "slabs 5  rows live 3  shared 2  held 2  free 13" in line
    assert "bytes reserved 12 KiB  in use 7 KiB (58%)" in line


def test_one_block_slabs_draw_one_row_per_cell():
    shot = replace(snap([layer([1, -1, 2], [1, 0, 1], num_slabs=3, per=1)]), slab_blocks=1)
    assert rows_per_slab(shot) == 1
    assert [(c.capacity, c.live, c.free) for c in slab_cells(shot, shot.layers[0])] == [(1, 1, 0), (1, 0, 1),
                                                                                         (1, 1, 0)]


def test_next_request_need_uses_the_announced_size_else_the_longest_sequence():
    longest = snap([], seq_rows={1: [0, 1], 2: [2, 3, 4, 5, 6]})  # block_size 16; the longest sequence: 5 blocks
    announced = {tokens: next_request_need(longest, model_of(meta={"next_request_tokens": tokens}))
                 for tokens in (40, 16, 1, 0, -3, "40")}
    assert announced == {40: 3, 16: 1, 1: 1, 0: 5, -3: 5, "40": 5}  # ceil(tokens / 16); not a positive int: 5
    assert next_request_need(longest, model_of()) == next_request_need(longest) == 5
    assert next_request_need(replace(longest, block_size=1), model_of(meta={"next_request_tokens": 5})) == 5
    assert next_request_need(snap([])) == 1  # no sequence: one block
    assert next_request_need(snap([], seq_rows={7: []})) == 1  # a sequence with no block yet: still one


def test_accounting_on_a_discrete_gpu_shows_the_host_rss_on_its_own():
    model = model_of(meta={"memory_model": "discrete"})
    model.append(sample(0.0, 0, 0, active=100, cache=10, rss=50, weights=60, pool_live=20, pool_free=5,
                        other_active=15, rss_other=-60))
    parts = [(p.label, p.bytes) for p in accounting(model, 1)]
    assert parts[-1] == ("host RSS (not on GPU)", 50)
    assert [label for label, _ in parts[:-1]] == ["weights", "pool live", "pool reserved-free", "other active",
                                                  "MLX cache"]


def one_layer(owners, num_slabs=2, seq_rows=None):
    refs = [1 if o >= 0 else 0 for o in owners]
    return snap([layer(owners, refs, num_slabs)], seq_rows=seq_rows or {})


def test_free_run_origin_looks_the_op_up_only_until_the_rows_were_seen_free():
    """A shrink moved seq 1's rows 4-5 down (no op of seq 1's frees them) and seq 1 was released later: the run is
    not "freed by seq 1's release" at a time after the inspected moment."""
    model = model_of((1.0, one_layer([2, 2, -1, -1, 1, 1, -1, -1])),
                     (2.0, [BlockMove(layers=1, moves=[(4, 2), (5, 3)], count=2, bytes=0)]),
                     (5.0, [Release(1)]),
                     (6.0, one_layer([2, 2, -1, -1, -1, -1, -1, -1])))
    origin = free_run_origin(model, 0, 4, 2, before=3.0)
    assert (origin.seq, origin.last_owned, origin.seen_free, origin.op, origin.op_t) == (1, 1.0, 3.0, "", None)
    assert origin.describe() == "last owned by seq 1 at 1.00s, free by 3.00s"


def test_free_run_origin_names_the_main_holder_sequence_zero_and_skips_rows_never_minted():
    model = model_of((1.0, one_layer([2, 1, 1, 0, 0, 0])), (2.0, one_layer([-1, -1, -1, -1, -1, -1])))
    assert free_run_origin(model, 0, 0, 3, before=2.0).seq == 1  # two rows of seq 1 against one of seq 2
    assert free_run_origin(model, 0, 3, 3, before=2.0).describe() == "last owned by seq 0 at 1.00s, free by 2.00s"
    tail = free_run_origin(model, 0, 6, 2, before=2.0)  # capacity rows 6-7: never minted (no row_owner entry)
    assert tail.seq is None and tail.describe().startswith("never used")
    assert free_run_origin(model, 1, 0, 3, before=2.0).seq is None  # a layer the recording does not have


def test_free_run_origin_scans_a_bounded_history():
    """The inspector looks back at most HISTORY_LIMIT snapshots: a run freed longer ago than that is shown as never
    used in the kept history (its text says "or freed before it"), one freed within it names its sequence."""
    free = one_layer([-1] * 4)
    model = model_of((1.0, one_layer([1, 1, 1, -1])), *((2.0 + k, free) for k in range(HISTORY_LIMIT)),
                     max_keyframes=2 * HISTORY_LIMIT)  # every snapshot kept whole: exact at every instant
    assert free_run_origin(model, 0, 0, 3, before=HISTORY_LIMIT + 1.0).seq is None  # 1.0 s is 401 snapshots back
    assert free_run_origin(model, 0, 0, 3, before=HISTORY_LIMIT + 0.5).seq == 1  # 400 back


def test_shrink_so_far_sums_the_shrink_events_up_to_the_cursor():
    """The Memory view's "reclaimed ... (N slabs)" and the Slabs view's "last @" line."""
    reports = [ShrinkReport(slabs_released=n, bytes_released=n * 100, blocks_moved=2 * n, footprint_before=1000,
                            footprint_after=1000 - 10 * n) for n in (1, 2, 4)]
    model = model_of()
    for t, report in zip((1.0, 2.0, 3.0), reports):
        model.append(Shrunk(t=t, step=0, tokens=0, report=report))
    figures = {}
    for until in (None, 3.0, 2.5, 2.0, 1.0, 0.5):
        so_far = shrink_so_far(model, until)
        tally = so_far.tally
        figures[until] = (tally.events, tally.slabs_released, tally.blocks_moved, tally.reclaimed_bytes,
                          so_far.last.t if so_far.last else None)
    assert figures == {None: (3, 7, 14, 70, 3.0), 3.0: (3, 7, 14, 70, 3.0), 2.5: (2, 3, 6, 30, 2.0),
                       2.0: (2, 3, 6, 30, 2.0), 1.0: (1, 1, 2, 10, 1.0), 0.5: (0, 0, 0, 0, None)}
    assert shrink_so_far(model_of(), None).last is None
