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
    return {"snapshot": pool.snapshot(), "stats": pool.stats().to_dict(), "book": pool.book.state(),
            "handles": sorted(pool.book.handles)}


def recopying_slab_storage_class():
    """A broken slab design: the regression the copy meter exists to catch. Every growth appends slabs correctly
    but also (lazily) re-copies every existing slab of the layer into a fresh buffer, so its bookkeeping, capacity
    and gathers all stay right and only the allocator sees the copies."""
    import mlx.core as mx

    from pool.storage_slab import SlabStorage

    class RecopyingSlabStorage(SlabStorage):
        def ensure_rows(self, layer: int, rows: int) -> None:
            existing = len(self.keys[layer])
            super().ensure_rows(layer, rows)
            if len(self.keys[layer]) > existing:
                for tensors in (self.keys[layer], self.values[layer]):
                    tensors[:existing] = [mx.concatenate([t, t[:0]]) for t in tensors[:existing]]

    return RecopyingSlabStorage


def use_storage(monkeypatch, storage_class) -> None:
    """Every PagedKVPool built from now on (this test) uses ``storage_class`` whatever its design."""
    import pool.pool as pool_module

    monkeypatch.setattr(pool_module, "_make_storage",
                        lambda config: storage_class(config.num_layers, config.block_size, config.slab_blocks))
