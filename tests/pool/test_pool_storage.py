"""Storage designs against the dense reference (mlx-lm's KVCache / plain concatenation), byte for byte."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache

from pool import PoolError

from pool_helpers import make_kv
from pool_writes import write_kv

DESIGNS = ["slab", "monolithic"]


def write_all_layers(pool, seq, start, keys, values):
    pool.prepare_write(seq, start, keys.shape[0])
    for layer in range(pool.config.num_layers):
        write_kv(pool, layer, seq, start, keys, values)


@pytest.mark.parametrize("design", DESIGNS)
def test_span_crossing_slabs_round_trips_against_dense_kvcache(tiny_pool, design):
    pool = tiny_pool(design, num_layers=2)  # slab: 8 tokens per slab
    dense = KVCache()
    pool.add_sequence(0)
    position = 0
    for chunk, seed in ((3, 1), (21, 2), (1, 3), (13, 4)):  # partial heads/tails, spans over 3+ slabs
        keys, values = make_kv(chunk, seed=seed)
        write_all_layers(pool, 0, position, keys, values)
        ref_k, ref_v = dense.update_and_fetch(keys.transpose(1, 0, 2)[None], values.transpose(1, 0, 2)[None])
        position += chunk
        for layer in range(2):
            got = pool.gather_visible(layer, 0)
            assert mx.array_equal(got.keys, ref_k[0]) and mx.array_equal(got.values, ref_v[0])
    assert pool.gather_visible(0, 0).num_runs == (5 if design == "slab" else 1)  # 38 tokens = 10 rows / 2
    pool.check_integrity()


def test_slab_growth_appends_exact_slabs_and_copies_nothing(tiny_pool):
    pool = tiny_pool("slab", num_layers=3, block_size=4, slab_blocks=2)
    for seq, tokens in enumerate((20, 9, 16)):  # 5, 3, 4 rows -> capacities 6, 8, 12 rows
        pool.add_sequence(seq)
        keys, values = make_kv(tokens, seed=seq)
        write_all_layers(pool, seq, 0, keys, values)
    assert [len(pool.storage.keys[layer]) for layer in range(3)] == [6, 6, 6]
    assert pool.counters().slab_appends == 18 == pool.book.counters.slab_appends
    assert pool.counters().bytes_copied == 0 and pool.counters().grow_events == 0
    bytes_per_row = 2 * 4 * 2 * 4 * 4
    assert pool.stats().bytes_reserved == 3 * 12 * bytes_per_row
    assert pool.stats().bytes_in_use == 3 * 12 * bytes_per_row
    pool.check_integrity()


def test_monolithic_growth_copies_old_contents(tiny_pool):
    pool = tiny_pool("monolithic", num_layers=2, block_size=2)
    keys, values = make_kv(2 * 40, seed=1)  # 40 rows -> 64
    pool.add_sequence(0)
    write_all_layers(pool, 0, 0, keys, values)
    assert pool.counters().grow_events == 2 and pool.counters().bytes_copied == 0
    more_k, more_v = make_kv(2 * 30, seed=2)  # 70 rows -> 96: copies 64 rows per layer
    write_all_layers(pool, 0, 80, more_k, more_v)
    bytes_per_row = 2 * 2 * 2 * 4 * 4
    assert pool.counters().grow_events == 4
    assert pool.counters().bytes_copied == 2 * 64 * bytes_per_row == pool.book.counters.bytes_copied
    got = pool.gather_visible(1, 0)
    assert mx.array_equal(got.keys, mx.concatenate([keys, more_k]).transpose(1, 0, 2)) and got.num_runs == 1
    pool.check_integrity()


@pytest.mark.parametrize("design", DESIGNS)
def test_gather_over_interleaved_fragmented_table(tiny_pool, design):
    pool = tiny_pool(design, num_layers=1, block_size=2, slab_blocks=4)
    refs = {}
    for step in range(8):  # sequences 0 and 1 alternate block by block: rows interleave within slabs
        for seq in (0, 1):
            if step == 0:
                pool.add_sequence(seq)
                refs[seq] = []
            keys, values = make_kv(2, seed=10 * step + seq)
            write_all_layers(pool, seq, 2 * step, keys, values)
            refs[seq].append((keys, values))
    assert pool.book.table(0).rows == [0, 2, 4, 6, 8, 10, 12, 14]
    pool.release(0)  # frees the even rows: holes everywhere
    pool.add_sequence(2)
    keys, values = make_kv(15, seed=99)
    write_all_layers(pool, 2, 0, keys, values)
    assert pool.book.table(2).rows == [0, 2, 4, 6, 8, 10, 12, 14]  # freed rows reused lowest first
    got = pool.gather_visible(0, 2)
    assert mx.array_equal(got.keys, keys.transpose(1, 0, 2)) and mx.array_equal(got.values, values.transpose(1, 0, 2))
    assert got.num_runs == (4 if design == "slab" else 1)
    ref1 = mx.concatenate([k for k, _ in refs[1]]).transpose(1, 0, 2)
    assert mx.array_equal(pool.gather_visible(0, 1).keys, ref1)
    pool.check_integrity()


@pytest.mark.parametrize("design", DESIGNS)
def test_copy_on_write_keeps_the_original_intact(tiny_pool, design):
    pool = tiny_pool(design, num_layers=2)
    keys, values = make_kv(10, seed=1)
    pool.add_sequence(1)
    write_all_layers(pool, 1, 0, keys, values)
    pool.clone(1, 2, 6)
    new_k, new_v = make_kv(3, seed=2)
    write_all_layers(pool, 2, 5, new_k, new_v)  # overwrites position 5 of a shared block, extends to 8
    assert pool.counters().cow_copies == 2
    for layer in range(2):
        assert mx.array_equal(pool.gather_visible(layer, 1).keys, keys.transpose(1, 0, 2))
        expected = mx.concatenate([keys[:5], new_k]).transpose(1, 0, 2)
        assert mx.array_equal(pool.gather_visible(layer, 2).keys, expected)
    pool.check_integrity()


def test_logical_start_slices_the_visible_window(tiny_pool):
    pool = tiny_pool("slab", num_layers=1)
    keys, values = make_kv(19, seed=3)
    pool.add_sequence(0)
    write_all_layers(pool, 0, 0, keys, values)
    pool.set_logical_start(0, 9)
    got = pool.gather_visible(0, 0)
    assert got.keys.shape == (2, 10, 4) and mx.array_equal(got.values, values[9:].transpose(1, 0, 2))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("design", DESIGNS)
def test_every_layer_holds_its_own_bytes_at_the_shared_rows(tiny_pool, design, dtype):
    """One row space: a row is one block of every layer, but each layer's storage holds that layer's K/V there.
    Different bytes per layer survive writes, a copy-on-write (the shared row copied in every layer) and growth."""
    pool = tiny_pool(design, num_layers=3)
    per_layer = [make_kv(10, dtype=dtype, seed=layer) for layer in range(3)]
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 10)
    slots = pool.write_slots([0], [0], 10)
    for layer, (keys, values) in enumerate(per_layer):
        pool.write(layer, slots, keys[None], values[None])
    pool.clone(0, 1, 10)
    pool.prepare_write(1, 10, 1)  # copies the shared tail block's row in every layer
    tails = [make_kv(1, dtype=dtype, seed=10 + layer) for layer in range(3)]
    slots = pool.write_slots([1], [10], 1)
    for layer, (keys, values) in enumerate(tails):
        pool.write(layer, slots, keys[None], values[None])
    pool.add_sequence(2)
    pool.prepare_write(2, 0, 30)  # grows every layer
    assert pool.counters().cow_copies == 3
    for layer, ((keys, values), (tail_k, tail_v)) in enumerate(zip(per_layer, tails)):
        got = pool.gather_visible(layer, 0)
        assert mx.array_equal(got.keys, keys.transpose(1, 0, 2)) and mx.array_equal(got.values,
                                                                                   values.transpose(1, 0, 2))
        forked = pool.gather_visible(layer, 1)
        assert mx.array_equal(forked.keys, mx.concatenate([keys, tail_k]).transpose(1, 0, 2))
        assert mx.array_equal(forked.values, mx.concatenate([values, tail_v]).transpose(1, 0, 2))
    pool.check_integrity()


def test_the_first_write_fixes_one_geometry_for_every_layer(tiny_pool):
    pool = tiny_pool("slab", num_layers=2)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 4)
    keys, values = make_kv(4, n_kv_heads=2, head_dim=4)
    write_all_layers(pool, 0, 0, keys, values)
    assert all(len(pool.storage.keys[layer]) == 1 for layer in range(2))  # every layer got storage at once
    other_k, other_v = make_kv(4, n_kv_heads=1, head_dim=8)
    with pytest.raises(PoolError, match="in every layer"):
        write_kv(pool, 1, 0, 0, other_k, other_v)
