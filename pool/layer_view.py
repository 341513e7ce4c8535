"""The narrow face the pool shows kernels, step plans and benchmarks: one layer, read-only, typed.

A fused paged-decode kernel needs, for the sequences of a decode step, each one's block-table rows (logical order),
its visible range ``[logical_start, length)`` and the layer's K/V slab tensors with their geometry; a step plan
needs the same to decide whether a plan built for one layer fits another. ``PagedKVPool.layer_view`` hands exactly
that over, so nothing outside ``pool/`` reaches into the pool's bookkeeping or storage.

The lists and tensors are the pool's own (no copy: a decode step asks once per layer): read them, never mutate
them, and ask again after the pool changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pool.config import LayerGeometry


@dataclass(frozen=True)
class LayerView:
    """One layer for ``seq_ids``: ``rows[i]``, ``lengths[i]``, ``logical_starts[i]`` belong to ``seq_ids[i]``.

    ``keys``/``values``: the layer's K and V tensors (slab design: one per slab, appended in order; monolithic: one
    tensor), each ``[rows_per_slab, block_size, n_kv_heads, head_dim]``; empty before the layer's first write
    (``geometry`` None then)."""

    layer: int
    seq_ids: tuple[int, ...]
    rows: tuple[list[int], ...]
    lengths: tuple[int, ...]
    logical_starts: tuple[int, ...]
    block_size: int
    design: str
    geometry: LayerGeometry | None
    keys: tuple[Any, ...]
    values: tuple[Any, ...]
    rows_per_slab: int

    @property
    def num_slabs(self) -> int:
        """Separate K tensors a kernel addresses."""
        return len(self.keys)

    @property
    def written(self) -> bool:
        return self.geometry is not None
