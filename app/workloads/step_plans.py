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
        self._entries: list[tuple[tuple, tuple, object, object]] = []  # (geometry key, tables, plan, meta)
        self.built = 0
        self.reused = 0

    def plan(self, layer: int, scale: float):
        """(plan, meta array) for ``layer``: a verified-equal cached one, else a new one (cached)."""
        view = self.pool.layer_view(layer, self.seq_ids)
        key = (view.num_slabs, view.rows_per_slab, view.geometry, float(scale))
        for cached_key, cached_tables, plan, meta in self._entries:
            if cached_key == key and _same_tables(cached_tables, view):
                self.reused += 1
                return plan, meta
        import mlx.core as mx

        from pool.kernels.paged_decode import plan_for_view

        plan = plan_for_view(view, scale=scale)
        meta = mx.array(plan.meta)
        # copies of the rows: the plan must be compared with what it was built from, even if a table changed since
        self._entries.append((key, ([list(rows) for rows in view.rows], view.lengths, view.logical_starts), plan,
                              meta))
        self.built += 1
        return plan, meta


def _same_tables(cached: tuple, view) -> bool:
    rows, lengths, starts = cached
    return lengths == view.lengths and starts == view.logical_starts and rows == list(view.rows)
