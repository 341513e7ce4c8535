"""Shared helpers for the pool tests (imported as a plain module: tests/pool is on sys.path)."""

from __future__ import annotations


def make_kv(num_tokens: int, n_kv_heads: int = 2, head_dim: int = 4, dtype: str = "float32", seed: int = 0):
    """Distinct K and V [num_tokens, H, D] (random normal; every token distinguishable)."""
    import mlx.core as mx

    from pool.storage_base import DTYPES

    key = mx.random.key(seed)
    k_key, v_key = mx.random.split(key)
    shape = (num_tokens, n_kv_heads, head_dim)
    keys = mx.random.normal(shape, key=k_key).astype(DTYPES[dtype])
    values = mx.random.normal(shape, key=v_key).astype(DTYPES[dtype])
    return keys, values


def full_state(pool) -> dict:
    """Everything observable about a pool's topology and counters (compared before/after a failing call)."""
    return {"snapshot": pool.snapshot(), "stats": pool.stats().to_dict(), "book": pool.book.counters.to_dict(),
            "seqs": {s: (pool.seq_length(s), pool.logical_start(s),
                         [pool.block_ids(layer, s) for layer in range(pool.config.num_layers)])
                     for s in pool.sequence_ids()},
            "handles": sorted(pool.book.handles)}
