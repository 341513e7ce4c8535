"""Allocation-size arithmetic and the checks that run before anything is allocated (plain Python, no mlx).

MLX does not raise on an allocation the machine cannot hold: a failed huge allocation ends the process with
SIGSEGV (measured: ``mx.zeros`` of 5 GiB under a 4 GiB address-space limit), and a shape dimension past int32
raises OverflowError from deep inside storage. So sizes are checked here first, against a :class:`MemoryLimits`
(what the device can give the pool; ``pool/device_limits.py`` measures it, tests pass their own).

Vocabulary (the pool's): a *row* is one block of ``block_size`` tokens; storage keeps K and V in separate
tensors shaped ``[rows, n_kv_heads, block_size, head_dim]``; ``bytes_per_row`` counts K + V of one row. A slab
tensor holds ``slab_blocks`` rows; the monolithic design holds a layer's whole capacity in one tensor.

Users: the pool (first write of a layer, every growth: ``check_pool_capacity``), the workloads before a run
starts (``check_pool_capacity`` on the first slab of every layer), what-if sizing (``probes/sizing.py``) and the
fused kernel's guard (``largest_buffer_elements``, ``index_range_problem``: pool/fused_decision.py and the
kernels' entry, pool/kernels/plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pool.config import MAX_DIMENSION, chunk_rows
from pool.errors import SizeLimitError
from pool.units import format_bytes  # noqa: F401  (re-exported: the pool's messages and its users)

INDEX_LIMIT = 2**32         # elements a 32-bit unsigned index can address: the fused kernels decline a K/V tensor
                            # past it (pool/fused_decision.py rule 6, pool/kernels/plan.py)


@dataclass(frozen=True)
class MemoryLimits:
    """What one pool may allocate: ``memory_bytes`` in total (K + V of every layer), ``max_buffer_bytes`` for
    one tensor. ``source`` says where the figures come from (named in every error)."""

    memory_bytes: int
    max_buffer_bytes: int
    source: str


# ---- arithmetic ----------------------------------------------------------------------------------------------
def elements_per_row(block_size: int, n_kv_heads: int, head_dim: int) -> int:
    """Elements of one row in one tensor (K or V)."""
    return block_size * n_kv_heads * head_dim


def elements_per_slab(slab_blocks: int, block_size: int, n_kv_heads: int, head_dim: int) -> int:
    """Elements of one slab tensor (K or V): ``[slab_blocks, n_kv_heads, block_size, head_dim]``."""
    return slab_blocks * elements_per_row(block_size, n_kv_heads, head_dim)


def bytes_per_slab(slab_blocks: int, block_size: int, n_kv_heads: int, head_dim: int, itemsize: int) -> int:
    """Bytes of one slab tensor (K or V; a slab of a layer is two of them)."""
    return elements_per_slab(slab_blocks, block_size, n_kv_heads, head_dim) * itemsize


def bytes_per_row(block_size: int, n_kv_heads: int, head_dim: int, itemsize: int) -> int:
    """K + V bytes of one row (the bookkeeping's ``bytes_per_row``)."""
    return 2 * elements_per_row(block_size, n_kv_heads, head_dim) * itemsize


def largest_buffer_rows(design: str, slab_blocks: int, capacities: Sequence[int]) -> int:
    """Rows of the largest single tensor a pool with these per-layer capacities holds."""
    if design == "slab":
        return slab_blocks if any(capacities) else 0
    return max(capacities, default=0)


def largest_buffer_elements(design: str, slab_blocks: int, capacities: Sequence[int], block_size: int,
                            n_kv_heads: int, head_dim: int) -> int:
    """Elements of the largest single K (or V) tensor: one slab, or a monolithic layer's whole tensor."""
    return largest_buffer_rows(design, slab_blocks, capacities) * elements_per_row(block_size, n_kv_heads, head_dim)


# ---- checks --------------------------------------------------------------------------------------------------
def index_range_problem(elements: int, what: str, limit: int = INDEX_LIMIT - 1) -> str | None:
    """Why ``elements`` cannot be addressed by a 32-bit unsigned index (or by ``limit``), or None when they can."""
    if elements > limit:
        bound = "a 32-bit index addresses at most" if limit == INDEX_LIMIT - 1 else "the limit is"
        return f"{what}: {elements:,} elements; {bound} {limit:,}"
    return None


def check_index_range(elements: int, what: str) -> None:
    """SizeLimitError when ``elements`` cannot be addressed by a 32-bit unsigned index."""
    problem = index_range_problem(elements, what)
    if problem:
        raise SizeLimitError(problem)


def check_buffer(nbytes: int, limits: MemoryLimits, what: str) -> None:
    """SizeLimitError when one tensor of ``nbytes`` exceeds the largest allocation the device allows."""
    if nbytes > limits.max_buffer_bytes:
        raise SizeLimitError(f"{what} of {format_bytes(nbytes)} exceeds the largest allocation, "
                             f"{format_bytes(limits.max_buffer_bytes)} ({limits.source})")


def check_total(nbytes: int, limits: MemoryLimits, what: str) -> None:
    """SizeLimitError when ``nbytes`` in total exceed what the device can give."""
    if nbytes > limits.memory_bytes:
        raise SizeLimitError(f"{what} need {format_bytes(nbytes)}; the device has room for "
                             f"{format_bytes(limits.memory_bytes)} ({limits.source})")


def check_pool_capacity(design: str, slab_blocks: int, capacities: Sequence[int],
                        row_bytes: int | Sequence[int], limits: MemoryLimits, what: str = "the KV pool") -> None:
    """SizeLimitError unless a pool whose layers reserve ``capacities`` rows fits ``limits``: every tensor under
    the largest allocation (and inside int32 shapes), all of them (K + V, every layer) under the memory.
    ``row_bytes``: K + V bytes of one row, one figure for every layer or one per layer. Mutates nothing."""
    per_layer = [row_bytes] * len(capacities) if isinstance(row_bytes, int) else list(row_bytes)
    rows = largest_buffer_rows(design, slab_blocks, capacities)
    if rows > MAX_DIMENSION:
        raise SizeLimitError(f"{what}: one tensor would hold {rows:,} rows; MLX shapes stop at {MAX_DIMENSION:,}")
    unit = "slab" if design == "slab" else "tensor"
    check_buffer(rows * max(per_layer, default=0) // 2, limits, f"{what}: one {rows:,}-row {unit}")
    total = sum(capacity * size for capacity, size in zip(capacities, per_layer))
    check_total(total, limits, f"{what}: {sum(capacities):,} rows (K + V over {len(capacities)} layers)")


def check_first_allocation(num_layers: int, design: str, block_size: int, slab_blocks: int, n_kv_heads: int,
                           head_dim: int, itemsize: int, limits: MemoryLimits) -> None:
    """SizeLimitError unless the smallest pool of this geometry fits: one slab (or grow chunk) per layer, which
    the first write allocates. Runs before a workload starts, so a hopeless ``--slab-blocks`` or ``--block-size``
    is one line instead of a segfault minutes later."""
    for name, value in (("block_size", block_size), ("slab_blocks", slab_blocks)):
        if value > MAX_DIMENSION:
            raise SizeLimitError(f"{name} {value:,} exceeds MLX's largest shape dimension {MAX_DIMENSION:,}")
    chunk = chunk_rows(design, slab_blocks)
    check_pool_capacity(design, slab_blocks, [chunk] * num_layers,
                        bytes_per_row(block_size, n_kv_heads, head_dim, itemsize), limits,
                        f"the pool's first {'slab' if design == 'slab' else 'grow chunk'} ({chunk:,} blocks x "
                        f"{block_size:,} tokens per layer)")
