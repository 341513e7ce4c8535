"""Fixtures for the pool tests (helpers live in pool_helpers.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def tiny_pool():
    """Factory: PagedKVPool(num_layers, block_size=4, slab_blocks=2, design) — slabs of 8 tokens."""
    from pool import PagedKVPool, PoolConfig

    def build(design: str = "slab", num_layers: int = 2, block_size: int = 4, slab_blocks: int = 2, budget=None):
        return PagedKVPool(PoolConfig(num_layers=num_layers, block_size=block_size, slab_blocks=slab_blocks,
                                      design=design, max_blocks_per_layer=budget))

    return build


@pytest.fixture(autouse=True)
def empty_mlx_cache():
    """Measured copy figures (pool/copy_meter.py) include allocator slack: MLX may serve a small transient buffer
    from a larger cached one an earlier test left behind. Each test starts with an empty buffer cache, so its
    figures depend on what it does, not on the tests before it."""
    import mlx.core as mx

    mx.clear_cache()
