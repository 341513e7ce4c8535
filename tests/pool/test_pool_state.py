"""The book owns its serialisation (``state``/``from_state``), snapshots are built from a book plus observed figures
(no pool needed), and kernels read a step through ``step_view`` and a layer's tensors through ``slabs``."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from pool_helpers import make_kv

from pool import BlockBook, BookState, PoolError, apply_op, build_snapshot
from probes.synthetic import ScriptedTraffic
from pool_writes import write_kv


def _traffic_pool(tiny_pool, design="slab", steps=25):
    pool = tiny_pool(design, num_layers=2, block_size=4, slab_blocks=4)
    ops = []
    pool.add_op_listener(ops.append)

    def write(seq, start, n):
        keys, values = make_kv(n, seed=seq)
        for layer in range(2):
            write_kv(pool, layer, seq, start, keys, values)

    traffic = ScriptedTraffic(pool, seed=3, write=write, max_live=4, prefill=(3, 13))
    for _ in range(steps):
        traffic.step()
    return pool, traffic, ops


@pytest.mark.parametrize("design", ["slab", "monolithic"])
def test_state_round_trip_continues_exactly(tiny_pool, design):
    pool, traffic, ops = _traffic_pool(tiny_pool, design)
    state = pool.book_state()
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=BookState)
    assert wire == state
    restored = BlockBook.from_state(wire, check=True)
    assert restored.state() == state
    assert build_snapshot(restored, pool._observed()) == pool.snapshot()  # no fake pool: book + observed figures
    handles, mark = restored.handle_map(), len(ops)
    for _ in range(10):
        traffic.step()
    for op in ops[mark:]:
        apply_op(restored, op, handles)
    restored.check_integrity()
    assert restored.state() == pool.book_state()


def test_state_is_a_copy(tiny_pool):
    pool, traffic, _ = _traffic_pool(tiny_pool)
    state = pool.book_state()
    traffic.step()
    traffic.step()
    assert state != pool.book_state()
    assert BlockBook.from_state(state).state() == state


def test_damaged_states_are_refused(tiny_pool):
    pool, _, _ = _traffic_pool(tiny_pool)
    state = pool.book_state()
    rows = state.rows
    twice = msgspec.structs.replace(rows, free=rows.free + rows.free[:1] if rows.free else [0, 0])
    bad_refs = msgspec.structs.replace(rows, row_refcount=[r + 1 for r in rows.row_refcount])
    short = msgspec.structs.replace(rows, row_block=rows.row_block[:-1])
    for damaged in (twice, bad_refs, short):
        with pytest.raises(PoolError):
            BlockBook.from_state(msgspec.structs.replace(state, rows=damaged), check=True)
    seq_id, table = state.seqs[0]
    wrong_row = msgspec.structs.replace(table, rows=[row + 1 for row in table.rows])
    with pytest.raises(PoolError, match="table rows match block rows"):
        BlockBook.from_state(msgspec.structs.replace(state, seqs=[(seq_id, wrong_row), *state.seqs[1:]]), check=True)
    with pytest.raises(PoolError, match="ids out of range"):
        BlockBook.from_state(msgspec.structs.replace(state, next_block_id=0), check=True)
    uneven = dataclasses.replace(state.counters, rows_minted=state.counters.rows_minted + 1)
    with pytest.raises(PoolError, match="multiples of num_layers"):
        BlockBook.from_state(msgspec.structs.replace(state, counters=uneven), check=True)


def test_step_view_and_slabs_are_what_kernels_read(tiny_pool):
    pool = tiny_pool("slab", num_layers=2, block_size=4, slab_blocks=2)
    empty = pool.step_view([])
    assert not empty.written and empty.num_slabs == 0 and pool.slabs(0) == ([], [])
    for seq, tokens in ((0, 10), (1, 3)):
        pool.add_sequence(seq)
        pool.prepare_write(seq, 0, tokens)
        keys, values = make_kv(tokens, seed=seq)
        for layer in range(2):
            write_kv(pool, layer, seq, 0, keys, values)
    pool.set_logical_start(0, 5)
    view = pool.step_view([1, 0])
    assert view.seq_ids == (1, 0) and view.lengths == (3, 10) and view.logical_starts == (0, 5)
    assert view.rows == (tuple(pool.book.block_rows(1)), tuple(pool.book.block_rows(0)))
    assert view.num_slabs == 2 and view.rows_per_slab == 2 and view.geometry.head_dim == 4
    assert view.version == pool.book.version
    keys, values = pool.slabs(1)
    assert keys is pool.storage.keys[1] and values is pool.storage.values[1]  # the pool's own lists, no copy
    assert keys[0].shape == (2, 2, 4, 4) and len(values) == 2  # [rows, H, block, D]
    pool.prepare_write(1, 3, 2)  # the view is a copy: it stays what it was
    assert view.lengths == (3, 10) and pool.step_view([1]).lengths == (5,)
    with pytest.raises(PoolError, match="out of range"):
        pool.slabs(2)
    with pytest.raises(PoolError, match="unknown sequence"):
        pool.step_view([0, 9])
