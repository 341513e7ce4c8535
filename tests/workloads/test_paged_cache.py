"""The paged cache adapter against mlx-lm's own caches, directly: same K/V arrays, same masks, same offsets."""

import mlx.core as mx
import pytest
from mlx_lm.models.cache import BatchKVCache, KVCache

from app.workloads.paged_cache import PagedStep
from pool import PagedKVPool, PoolConfig

H, D = 2, 8


def _kv(b, n, seed):
    key = mx.random.key(seed)
    return mx.random.normal((b, H, n, D), key=key), mx.random.normal((b, H, n, D), key=mx.random.split(key)[0])


@pytest.mark.parametrize("design", ["slab", "monolithic"])
def test_prefill_then_batched_decode_matches_kvcache_and_batchkvcache(design):
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=4, slab_blocks=2, design=design))
    lengths = [3, 11, 7]
    dense = []
    for seq, n in enumerate(lengths):
        pool.add_sequence(seq)
        k, v = _kv(1, n, seq)
        step = PagedStep(pool, [seq], [0], n, batched=False)
        assert step.offset == 0 and step.make_mask(n) == "causal"
        pk, pv = step.caches()[0].update_and_fetch(k, v)
        cache = KVCache()
        dk, dv = cache.update_and_fetch(k, v)
        assert mx.array_equal(pk, dk) and mx.array_equal(pv, dv)
        dense.append(cache)
    batch = BatchKVCache.merge(dense)
    for step_index in range(3):
        k, v = _kv(3, 1, 100 + step_index)
        starts = [n + step_index for n in lengths]
        step = PagedStep(pool, [0, 1, 2], starts, 1, batched=True)
        layer = step.caches()[0]
        assert mx.array_equal(layer.offset, batch.offset)
        assert mx.array_equal(layer.make_mask(1), batch.make_mask(1))
        pk, pv = layer.update_and_fetch(k, v)
        dk, dv = batch.update_and_fetch(k, v)
        assert pk.shape == dk.shape == (3, H, max(starts) + 1, D)
        assert mx.array_equal(pk, dk) and mx.array_equal(pv, dv)
    pool.check_integrity()


@pytest.mark.parametrize("design", ["slab", "monolithic"])
def test_a_batched_prefill_chunk_matches_one_kvcache_holding_the_batch(design):
    """A prefill chunk of three sequences at the same start (the scheduler's batched prefill) mirrors one ``KVCache``
    whose batch axis holds them: the same int offset and mask, the same K/V arrays, chunk after chunk (the second
    chunk reads each sequence's own history: rows from different slabs, stacked in the plan's order)."""
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=4, slab_blocks=2, design=design))
    for seq in (0, 1, 2):
        pool.add_sequence(seq)
    cache = KVCache()
    for start, n in ((0, 6), (6, 5)):
        k, v = _kv(3, n, start)
        step = PagedStep(pool, [2, 0, 1], [start] * 3, n, batched=False)
        layer = step.caches()[0]
        dense_mask = cache.make_mask(n, return_array=False, window_size=None)
        assert layer.offset == start and step.make_mask(n) == dense_mask == "causal"
        pk, pv = layer.update_and_fetch(k, v)
        dk, dv = cache.update_and_fetch(k, v)
        assert pk.shape == dk.shape == (3, H, start + n, D)
        assert mx.array_equal(pk, dk) and mx.array_equal(pv, dv)
    pool.check_integrity()


def test_bad_shapes_and_arguments_are_rejected():
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=4, slab_blocks=2))
    pool.add_sequence(0)
    pool.add_sequence(1)
    with pytest.raises(ValueError, match="all start at the same position"):
        PagedStep(pool, [0, 1], [0, 4], 1, batched=False)
    assert list(pool.step_view([0, 1]).lengths) == [0, 0]  # refused before any write was prepared
    pool.check_integrity()
    step = PagedStep(pool, [0], [0], 2, batched=False)
    k, v = _kv(1, 3, 0)
    with pytest.raises(ValueError, match="expected keys"):
        step.caches()[0].update_and_fetch(k, v)
    with pytest.raises(ValueError, match="mask asked for 3 tokens"):
        step.make_mask(3)
