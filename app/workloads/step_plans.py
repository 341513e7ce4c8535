"""Fused-kernel launch plans of one decode step, built once and shared by the layers they fit.

A plan (``pool.kernels.plan.DecodePlan`` + its ``meta`` as an ``mx.array``) depends only on the sequences' block
tables (rows), visible ranges (length, logical_start), the layer's slab geometry (slab count, rows per slab, KV
heads) and the softmax scale. Layers allocate in lockstep, so in the usual step every layer has the same tables
and one plan serves all of them: building it per layer cost ~0.1 ms of host time per layer (28 layers -> ~3 ms per
step), plus one host-to-device array per layer.

Reuse is verified, never assumed: each cached plan keeps a copy of the rows/ranges and the geometry it was built
from, and a layer reuses it only when its own current values compare equal (C-level list comparisons, ~1 us per
sequence). A layer that differs (after a copy-on-write, or a different slab count) gets its own plan.
"""

from __future__ import annotations

from typing import Sequence


class StepPlans:
    """Owns the plans built during one step (for ``seq_ids`` of ``pool``); reads the pool, mutates nothing of it.
    ``built``/``reused`` count plans made and layers served from an earlier one."""

    def __init__(self, pool, seq_ids: Sequence[int]):
        self.pool = pool
        self.seq_ids = list(seq_ids)
        self._entries: list[tuple[tuple, list[tuple[list[int], int, int]], object, object]] = []
        self.built = 0
        self.reused = 0

    def plan(self, layer: int, scale: float):
        """(plan, meta array) for ``layer``: a verified-equal cached one, else a new one (cached)."""
        key = self._geometry_key(layer, scale)
        ranges = self._ranges(layer)
        for cached_key, cached_ranges, plan, meta in self._entries:
            if cached_key == key and cached_ranges == ranges:
                self.reused += 1
                return plan, meta
        import mlx.core as mx

        from pool.kernels.paged_decode import plan_for_pool

        plan = plan_for_pool(self.pool, layer, self.seq_ids, scale=scale)
        meta = mx.array(plan.meta)
        # a copy: the plan must be compared with what it was built from, even if a table changed since
        self._entries.append((key, [(list(rows), length, start) for rows, length, start in ranges], plan, meta))
        self.built += 1
        return plan, meta

    def _geometry_key(self, layer: int, scale: float) -> tuple:
        storage = self.pool.storage
        slabs = storage.keys[layer]
        slab_blocks = int(slabs[0].shape[0]) if slabs else 0
        return (len(slabs), slab_blocks, storage.geometry[layer], float(scale))

    def _ranges(self, layer: int) -> list[tuple[list[int], int, int]]:
        tables = self.pool.book.tables
        out = []
        for seq_id in self.seq_ids:
            table = tables(seq_id)[layer]
            out.append((table.rows, table.length, table.logical_start))
        return out
