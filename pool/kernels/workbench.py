"""Filled one-layer pools in a chosen block-table layout, for the kernels' correctness tests and ``slabscope bench
decode``. Imports mlx only inside functions.

Layouts (what the block tables look like after filling):
* ``single``: one slab holds every row (slab_blocks = all blocks needed), each sequence's rows consecutive.
* ``multi``: slabs of ``slab_blocks`` rows; sequences written one after another, so each spans a few slabs in
  order (what successive distinct prefills leave behind).
* ``fragmented``: sequences written one block at a time, round-robin, so consecutive blocks of a sequence sit in
  rows ``batch`` apart and every block is its own same-slab run for the gather path (its worst case).
"""

from __future__ import annotations

from typing import Sequence

from pool.config import DEFAULT_BLOCK_SIZE, DEFAULT_SLAB_BLOCKS

LAYOUTS = ("single", "multi", "fragmented")


def fill_pool(lengths: Sequence[int], *, n_kv_heads: int, head_dim: int, dtype: str, layout: str,
              block_size: int = DEFAULT_BLOCK_SIZE, slab_blocks: int = DEFAULT_SLAB_BLOCKS, seed: int = 0,
              design: str = "slab"):
    """A PagedKVPool (1 layer, ``design`` storage) holding sequences 0..B-1 of the given lengths with random K/V
    (normal, std 1). Returns (pool, seq_ids). Evaluates everything it writes."""
    import mlx.core as mx

    from pool import PagedKVPool, PoolConfig

    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    blocks = [-(-n // block_size) for n in lengths]
    if layout == "single":
        slab_blocks = max(1, sum(blocks))
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=block_size, slab_blocks=slab_blocks, design=design))
    seq_ids = list(range(len(lengths)))
    key = mx.random.key(seed)
    data = []
    for seq_id, n in zip(seq_ids, lengths):
        pool.add_sequence(seq_id)
        key, k_key, v_key = mx.random.split(key, 3)
        shape = (n, n_kv_heads, head_dim)
        data.append((mx.random.normal(shape, key=k_key).astype(getattr(mx, dtype)),
                     mx.random.normal(shape, key=v_key).astype(getattr(mx, dtype))))
    mx.eval(data)
    if layout == "fragmented":
        _write_round_robin(pool, seq_ids, lengths, data, block_size)
    else:
        for seq_id, n, (k, v) in zip(seq_ids, lengths, data):
            pool.prepare_write(seq_id, 0, n)
            pool.write(0, pool.write_slots([seq_id], [0], n), k[None], v[None])
            mx.eval(pool.storage.keys[0], pool.storage.values[0])
    return pool, seq_ids


def _write_round_robin(pool, seq_ids, lengths, data, block_size: int) -> None:
    """Write block b of every sequence before block b+1 of any, so rows interleave across sequences."""
    import mlx.core as mx

    for start in range(0, max(lengths), block_size):
        for seq_id, n, (k, v) in zip(seq_ids, lengths, data):
            if start >= n:
                continue
            stop = min(n, start + block_size)
            pool.prepare_write(seq_id, start, stop - start)
            pool.write(0, pool.write_slots([seq_id], [start], stop - start), k[None, start:stop], v[None, start:stop])
        mx.eval(pool.storage.keys[0], pool.storage.values[0])


def random_queries(batch: int, n_q_heads: int, head_dim: int, dtype: str, seed: int = 1, std: float = 2.0):
    """Decode queries [B, Hq, 1, D] (std 2: softmax peakier than uniform, so indexing errors show)."""
    import mlx.core as mx

    q = mx.random.normal((batch, n_q_heads, 1, head_dim), key=mx.random.key(seed)) * std
    return q.astype(getattr(mx, dtype))


def poison_unused(pool, layer: int = 0) -> int:
    """Overwrite with NaN every K/V position of ``layer`` that no sequence can see (free rows, the tail of partial
    last blocks, positions before a logical start), so a read of any of them shows in the output. Mutates the
    storage arrays (reassigned); returns the number of poisoned token positions."""
    import mlx.core as mx
    import numpy as np

    storage = pool.storage
    per_slab = int(storage.keys[layer][0].shape[0])
    bs = pool.config.block_size
    visible = [np.zeros((per_slab, bs), dtype=bool) for _ in storage.keys[layer]]
    for seq_id in pool.sequence_ids():
        table = pool.book.table(seq_id)
        for pos in range(table.logical_start, table.length):
            slab, local = divmod(table.rows[pos // bs], per_slab)
            visible[slab][local, pos % bs] = True
    poisoned = 0
    for tensors in (storage.keys[layer], storage.values[layer]):
        for i, slab in enumerate(tensors):
            mask = mx.array(visible[i])[:, None, :, None]  # [rows, 1, block, 1] over head-major rows
            tensors[i] = mx.where(mask, slab, mx.array(float("nan"), dtype=slab.dtype))
        mx.eval(tensors)
    storage.touch(layer, list(range(len(storage.keys[layer]))))  # new buffers: slab tables refresh them
    for mask in visible:
        poisoned += int((~mask).sum())
    return poisoned
