"""Bad input raises a clear PoolError and leaves the pool exactly as it was (snapshot, stats, counters, tables)."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest

from pool import BudgetExceeded, PoolError, PrefixHandle

from pool_helpers import full_state, make_kv
from pool_writes import write_kv


@pytest.fixture(params=["slab", "monolithic"])
def busy_pool(request, tiny_pool):
    """Two layers, sequence 1 (10 tokens), clone 2 (6 tokens, shared), a handle; budget 6 blocks per layer."""
    pool = tiny_pool(request.param, num_layers=2, budget=6)
    keys, values = make_kv(10, seed=1)
    pool.add_sequence(1)
    pool.prepare_write(1, 0, 10)
    for layer in range(2):
        write_kv(pool, layer, 1, 0, keys, values)
    pool.clone(1, 2, 6)
    pool.add_sequence(3)
    pool.prepare_write(3, 0, 4)
    for layer in range(2):
        write_kv(pool, layer, 3, 0, *make_kv(4, seed=3))
    pool.handle = pool.detach(3)
    pool.gather_visible(0, 1)
    return pool


def _foreign_handle(tiny_pool, design):
    """Handle 0 of another pool of the same configuration: its id collides with busy_pool's own handle 0."""
    other = tiny_pool(design, num_layers=2)
    other.add_sequence(3)
    other.prepare_write(3, 0, 4)
    handle = other.detach(3)
    assert handle.handle_id == 0
    return handle


def _bad_calls(pool, foreign):
    keys, values = make_kv(2, seed=7)
    k, v = keys[None], values[None]  # [1 sequence, 2 tokens, H, D]
    slots = pool.write_slots([1], [8], 2)  # block 2 of sequence 1: prepared, its own
    write = pool.write
    return [
        (lambda: write(0, slots, k.astype(mx.float16), v.astype(mx.float16)), "stores float32"),
        (lambda: write(0, slots, *(t[None] for t in make_kv(2, n_kv_heads=3))), "n_kv_heads=2"),
        (lambda: write(0, slots, *(t[None] for t in make_kv(2, head_dim=8))), "head_dim=4"),
        (lambda: write(0, slots, k, v[:, :1]), "must both be"),
        (lambda: write(0, slots, k[None], v[None]), "must both be"),
        (lambda: write(0, slots, mx.stack([keys, keys]), mx.stack([values, values])), r"must both be \[1, 2,"),
        (lambda: write(0, slots, np.zeros((1, 2, 2, 4)), v), "must be mx.array"),
        (lambda: write(0, slots, k.astype(mx.int32), v.astype(mx.int32)), "dtype must"),
        (lambda: write(0, slots, k[:, :, :0], v[:, :, :0]), "n_kv_heads >= 1"),
        (lambda: write(0, slots, k[:, :, :, :0], v[:, :, :, :0]), "head_dim >= 1"),
        (lambda: write(5, slots, k, v), "layer 5 out of range"),
        (lambda: write(0, (1, 8), k, v), "takes the WriteSlots"),
        (lambda: pool.write_slots([1], [9], 2), "not prepared"),
        (lambda: pool.write_slots([1], [10], 1), "not prepared"),
        (lambda: pool.write_slots([2], [4], 2), "shared; prepare_write"),
        (lambda: pool.write_slots([2], [5], 1), "shared; prepare_write"),
        (lambda: pool.write_slots([42], [0], 2), "unknown sequence 42"),
        (lambda: pool.write_slots([1, 42], [8, 0], 1), "unknown sequence 42"),
        (lambda: pool.write_slots([1, 3], [0], 2), "one start per sequence"),
        (lambda: pool.write_slots([], [], 2), "at least one"),
        (lambda: pool.write_slots([1, 1], [8, 8], 1), "appears twice"),
        (lambda: pool.write_slots([1], [8], 0), "num_tokens must be"),
        (lambda: pool.write_slots([1], ["8"], 1), "must be an int"),
        (lambda: pool.prepare_write(1, 11, 2), "past its length"),
        (lambda: pool.prepare_write(1, 0, 0), "num_tokens must be"),
        (lambda: pool.prepare_write(42, 0, 1), "unknown sequence 42"),
        (lambda: pool.prepare_write(2, 6, 4 * 4), "max_blocks_per_layer=6"),
        (lambda: pool.add_sequence(1), "already exists"),
        (lambda: pool.add_sequence(-1), "seq_id must be"),
        (lambda: pool.clone(1, 2, 4), "already exists"),
        (lambda: pool.clone(1, 9, 11), "exceeds sequence 1"),
        (lambda: pool.clone(42, 9, 1), "unknown sequence 42"),
        (lambda: pool.trim(1, 3), "not block-aligned"),
        (lambda: pool.trim(1, 12), "outside sequence 1"),
        (lambda: pool.release(42), "unknown sequence 42"),
        (lambda: pool.detach(42), "unknown sequence 42"),
        (lambda: pool.adopt(replace(pool.handle, handle_id=99), 9), "unknown or released prefix handle"),
        (lambda: pool.adopt(pool.handle, 1), "already exists"),
        (lambda: pool.release_handle(replace(pool.handle, handle_id=99)), "unknown or released prefix handle"),
        (lambda: pool.adopt(PrefixHandle(0, 4), 9), "issued by another pool"),
        (lambda: pool.adopt(foreign, 9), "issued by another pool"),
        (lambda: pool.release_handle(foreign), "issued by another pool"),
        (lambda: pool.release_handle(0), "expected a PrefixHandle"),
        (lambda: pool.reserve([1]), "reserve takes"),
        (lambda: pool.reserve({42: 4}), "unknown sequence 42"),
        (lambda: pool.gather_visible(0, 42), "unknown sequence 42"),
        (lambda: pool.gather_visible(-1, 1), "out of range"),
        (lambda: pool.step_view([1, 42]), "unknown sequence 42"),
        (lambda: pool.slabs(2), "out of range"),
        (lambda: pool.set_logical_start(1, 11), "past sequence 1's length"),
    ]


def test_every_bad_call_raises_and_changes_nothing(busy_pool, tiny_pool):
    for call, message in _bad_calls(busy_pool, _foreign_handle(tiny_pool, busy_pool.config.design)):
        before = full_state(busy_pool)
        with pytest.raises(PoolError, match=message):
            call()
        assert full_state(busy_pool) == before, message
        busy_pool.check_integrity()


def test_budget_error_is_budget_exceeded(busy_pool):
    with pytest.raises(BudgetExceeded):
        busy_pool.prepare_write(2, 6, 16)
    assert busy_pool.can_allocate(2) and not busy_pool.can_allocate(3)  # 4 live of 6


def test_bad_config_is_rejected():
    from pool import PagedKVPool, PoolConfig

    for kwargs, message in (({"design": "paged"}, "unknown pool design"), ({"block_size": 0}, "block_size"),
                            ({"max_blocks_per_layer": -1}, "max_blocks_per_layer")):
        with pytest.raises(PoolError, match=message):
            PagedKVPool(PoolConfig(num_layers=2, **kwargs))


@pytest.mark.parametrize("design", ["slab", "monolithic"])
def test_a_first_write_with_a_zero_dimension_fixes_no_geometry(tiny_pool, design):
    """The first write fixes every layer's geometry: with n_kv_heads or head_dim 0 it would fix 0 bytes per row."""
    pool = tiny_pool(design)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 3)
    keys, values = make_kv(3)
    for bad_k, bad_v in ((keys[:, :0], values[:, :0]), (keys[:, :, :0], values[:, :, :0])):
        before = full_state(pool)
        with pytest.raises(PoolError, match="need n_kv_heads >= 1 and head_dim >= 1"):
            write_kv(pool, 0, 0, 0, bad_k, bad_v)
        assert full_state(pool) == before and not pool.storage.initialised and pool.book.geometry is None
    write_kv(pool, 0, 0, 0, keys, values)
    assert pool.book.bytes_per_row == 2 * 4 * 2 * 4 * 4


def test_writes_through_stale_slots_are_refused(busy_pool):
    """Slots carry the row version they were resolved at: after a row change (here: a clone sharing the target
    block) a write through them would land in a row someone else reads, so it is refused and writes nothing."""
    keys, values = make_kv(2, seed=7)
    slots = busy_pool.write_slots([1], [8], 2)
    busy_pool.clone(1, 7, 10)  # block 2 of sequence 1 is shared now
    before = full_state(busy_pool)
    with pytest.raises(PoolError, match="stale"):
        busy_pool.write(0, slots, keys[None], values[None])
    assert full_state(busy_pool) == before
    storage_before = [mx.array(t) for t in busy_pool.storage.keys[0]]
    busy_pool.prepare_write(1, 8, 2)  # the copy-on-write gives sequence 1 its own block again
    busy_pool.write(0, busy_pool.write_slots([1], [8], 2), keys[None], values[None])
    shared_rows = busy_pool.book.table(7).rows
    for row in shared_rows:  # the clone's rows kept their bytes: the write went to the copied row
        slab, local = busy_pool.storage._slab_for_row(row)
        assert mx.array_equal(busy_pool.storage.keys[0][slab][local], storage_before[slab][local])
