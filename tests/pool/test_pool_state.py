"""The book owns its serialisation (``state``/``from_state``), snapshots are built from a book plus observed figures
(no pool needed), and kernels read a layer through ``layer_view``."""

from __future__ import annotations

import msgspec
import pytest
from pool_helpers import make_kv

from pool import BlockBook, BookState, PoolError, apply_op, build_snapshot
from probes.synthetic import ScriptedTraffic


def _traffic_pool(tiny_pool, design="slab", steps=25):
    pool = tiny_pool(design, num_layers=2, block_size=4, slab_blocks=4)
    ops = []
    pool.add_op_listener(ops.append)

    def write(seq, start, n):
        keys, values = make_kv(n, seed=seq)
        for layer in range(2):
            pool.write(layer, seq, start, keys, values)

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
    assert build_snapshot(restored, pool.observed()) == pool.snapshot()  # no fake pool: book + observed figures
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
    layer0 = state.layers[0]
    twice = msgspec.structs.replace(layer0, free=layer0.free + layer0.free[:1] if layer0.free else [0, 0])
    bad_refs = msgspec.structs.replace(layer0, row_refcount=[r + 1 for r in layer0.row_refcount])
    for layers in ([twice, *state.layers[1:]], [bad_refs, *state.layers[1:]], state.layers[:1]):
        with pytest.raises(PoolError):
            BlockBook.from_state(msgspec.structs.replace(state, layers=layers), check=True)
    with pytest.raises(PoolError, match="ids out of range"):
        BlockBook.from_state(msgspec.structs.replace(state, next_block_id=0), check=True)


def test_layer_view_is_what_kernels_read(tiny_pool):
    pool = tiny_pool("slab", num_layers=2, block_size=4, slab_blocks=2)
    assert not pool.layer_view(0).written and pool.layer_view(0).keys == ()
    for seq, tokens in ((0, 10), (1, 3)):
        pool.add_sequence(seq)
        pool.prepare_write(seq, 0, tokens)
        keys, values = make_kv(tokens, seed=seq)
        for layer in range(2):
            pool.write(layer, seq, 0, keys, values)
    pool.set_logical_start(0, 5)
    view = pool.layer_view(1, [1, 0])
    assert view.seq_ids == (1, 0) and view.lengths == (3, 10) and view.logical_starts == (0, 5)
    assert list(view.rows) == [pool.book.block_rows(1, 1), pool.book.block_rows(1, 0)]
    assert view.num_slabs == 2 and view.rows_per_slab == 2 and view.geometry.head_dim == 4
    assert view.keys[0].shape == (2, 4, 2, 4) and len(view.values) == 2
    with pytest.raises(PoolError):
        pool.layer_view(2)
