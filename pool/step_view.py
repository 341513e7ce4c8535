"""The narrow face the pool shows a step's kernels, launch plans and benchmarks: typed, frozen, one per step.

A fused paged-decode kernel needs, for the sequences of a decode step, each one's block-table rows (logical order),
its visible range ``[logical_start, length)`` and the slab geometry (slab count, rows per slab, KV heads); a paged
prefill needs the same. Every layer holds the same rows at the same indices (one row space) and grows together, so
one ``StepView`` serves every layer of a step, and so does one launch input built from it: a layer adds only its
own K/V tensors (``PagedKVPool.slabs(layer)``). ``PagedKVPool.step_view`` hands it over (like vLLM's
``KVCacheBlocks``), so nothing outside ``pool/`` reaches into the pool's bookkeeping or storage.

The view holds copies (tuples): it stays what it was when taken. ``version`` is the pool's row version then: a
view whose version differs from ``PagedKVPool.version()`` describes rows that have changed since.
"""

from __future__ import annotations

from dataclasses import dataclass

from pool.config import LayerGeometry


@dataclass(frozen=True)
class StepView:
    """``rows[i]``, ``lengths[i]``, ``logical_starts[i]`` belong to ``seq_ids[i]``; ``num_slabs`` tensors of
    ``rows_per_slab`` rows hold K (and V) in every layer (monolithic: one tensor of the whole capacity); ``geometry``
    is None before the pool's first write (no storage yet)."""

    seq_ids: tuple[int, ...]
    rows: tuple[tuple[int, ...], ...]
    lengths: tuple[int, ...]
    logical_starts: tuple[int, ...]
    block_size: int
    design: str
    geometry: LayerGeometry | None
    num_slabs: int
    rows_per_slab: int
    version: int

    @property
    def written(self) -> bool:
        return self.geometry is not None
