"""Storage designs against the dense reference (mlx-lm's KVCache / plain concatenation), byte for byte."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache

from pool import BlockContents, PagedKVPool, PoolConfig, PoolError

from pool_helpers import make_kv

DESIGNS = ["slab", "monolithic"]


def write_all_layers(pool, seq, start, keys, values):
    pool.prepare_write(seq, start, keys.shape[0])
    for layer in range(pool.config.num_layers):
        pool.write(layer, seq, start, keys, values)


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
    assert [pool.storage.num_slabs(layer) for layer in range(3)] == [6, 6, 6]
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
    assert pool.book.tables(0)[0].rows == [0, 2, 4, 6, 8, 10, 12, 14]
    pool.release(0)  # frees the even rows: holes everywhere
    pool.add_sequence(2)
    keys, values = make_kv(15, seed=99)
    write_all_layers(pool, 2, 0, keys, values)
    assert pool.book.tables(2)[0].rows == [0, 2, 4, 6, 8, 10, 12, 14]  # freed rows reused lowest first
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
def test_read_restore_block_byte_exact(tiny_pool, design, dtype):
    pool = tiny_pool(design, num_layers=2)
    keys, values = make_kv(8, dtype=dtype, seed=5)
    pool.add_sequence(0)
    write_all_layers(pool, 0, 0, keys, values)
    blocks = [[pool.read_block(block) for block in pool.block_ids(layer, 0)] for layer in range(2)]
    assert mx.array_equal(blocks[1][1].keys, keys[4:8]) and blocks[1][1].keys.dtype == keys.dtype
    restored = [[pool.restore_block(layer, c) for c in per_layer] for layer, per_layer in enumerate(blocks)]
    handle = pool.handle_from_blocks(restored, 8)
    pool.release(0)
    pool.adopt(handle, 1)
    pool.release_handle(handle)
    for layer in range(2):
        got = pool.gather_visible(layer, 1)
        assert mx.array_equal(got.keys, keys.transpose(1, 0, 2)) and mx.array_equal(got.values,
                                                                                   values.transpose(1, 0, 2))
    pool.release(1)
    assert pool.stats().live_blocks == 0
    pool.check_integrity()


def test_restore_releases_block_when_write_fails(tiny_pool, monkeypatch):
    pool = tiny_pool("slab", num_layers=1)
    keys, values = make_kv(4, seed=1)
    pool.add_sequence(0)
    write_all_layers(pool, 0, 0, keys, values)
    contents = pool.read_block(pool.block_ids(0, 0)[0])

    def broken(*args):
        raise RuntimeError("device lost")

    monkeypatch.setattr(pool.storage, "write_row", broken)
    with pytest.raises(RuntimeError, match="device lost"):
        pool.restore_block(0, contents)
    assert pool.stats().live_blocks == 1 and not pool.book.loose
    pool.check_integrity()
    with pytest.raises(PoolError, match="hold 2 tokens; expected 4"):
        pool.restore_block(0, BlockContents(0, keys[:2], values[:2]))


def test_set_slab_blocks_before_first_write_only():
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=2))
    pool.set_slab_blocks(3)
    keys, values = make_kv(14)
    pool.add_sequence(0)
    write_all_layers(pool, 0, 0, keys, values)
    assert pool.storage.num_slabs(0) == 3 and pool.gather_visible(0, 0).num_runs == 3
    with pytest.raises(PoolError, match="before the first write"):
        pool.set_slab_blocks(4)
