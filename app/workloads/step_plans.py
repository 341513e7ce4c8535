"""Fused-kernel launch plans of one decode step, built once and shared by the layers they fit.

A plan (``pool.kernels.plan.DecodePlan`` + its ``meta`` as an ``mx.array``) depends only on the sequences' block
tables (rows), visible ranges (length, logical_start), the layer's slab geometry (slab count, rows per slab, KV
heads) and the softmax scale. Layers allocate in lockstep, so in the usual step every layer has the same tables
and one plan serves all of them: building it per layer cost ~0.1 ms of host time per layer (28 layers -> ~3 ms per
step), plus one host-to-device array per layer.

Reuse is verified, never assumed: a layer reuses a plan only when its slab geometry equals the one the plan was
built for (``pool.layer_key``) and the pool says its tables equal those of the layer the plan was built from
(``pool.layers_matching``, asked once per plan: lengths and starts compared every step, rows compared again only
after a row version moved). A layer that differs (after a copy-on-write, or a different slab count) gets its own
plan.

Each plan also carries ``launches``, a dict the kernel fills with the launch it prepared for the plan
(``pool.kernels.paged_decode_cuda.CudaLaunch``: checks, variant lookup, shapes, grid, done once per step), so the
layers after the first only hand over their slabs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class StepPlan:
    """One plan of the step: the layer key and scale it was built for, and the layers whose tables it fits."""

    key: tuple
    plan: object
    meta: object
    matching: frozenset = frozenset()  # layers whose tables equal ``layer``'s this step (``pool.layers_matching``)
    launches: dict = field(default_factory=dict)


class StepPlans:
    """Owns the plans built during one step (for ``seq_ids`` of ``pool``); reads the pool, mutates nothing of it.
    ``built``/``reused`` count plans made and layers served from an earlier one."""

    def __init__(self, pool, seq_ids: Sequence[int]):
        self.pool = pool
        self.seq_ids = tuple(seq_ids)
        self._entries: list[StepPlan] = []
        self.built = 0
        self.reused = 0

    def entry(self, layer: int, scale: float) -> StepPlan:
        """The ``StepPlan`` serving ``layer``: an earlier one whose key matches and whose layer's tables equal
        this layer's, else a new one built from this layer's view (cached)."""
        key = (*self.pool.layer_key(layer), float(scale))
        for entry in self._entries:
            if entry.key == key and layer in entry.matching:
                self.reused += 1
                return entry
        import mlx.core as mx

        from pool.kernels.paged_decode import plan_for_view

        plan = plan_for_view(self.pool.layer_view(layer, self.seq_ids), scale=scale)
        entry = StepPlan(key, plan, mx.array(plan.meta), self.pool.layers_matching(layer, self.seq_ids))
        self._entries.append(entry)
        self.built += 1
        return entry
