"""Host-side plan of one paged-decode launch, shared by the CUDA and Metal kernels (plain Python + numpy, no mlx).

A plan turns the pool's block tables (physical rows per sequence, in logical order) into one int32 ``meta`` array
that a kernel reads, and splits every sequence's context into equal chunks so that small batches still fill the
GPU (flash-decoding: each chunk yields a partial softmax state; a second pass merges them).

``meta`` layout (int32): ``[slab_blocks, table_stride, chunk_tokens, scale_bits, (start, end) * B, table * B]``;
``scale_bits`` is the float32 softmax scale reinterpreted as int32 (kernels take no float scalars). A physical row
``r`` lives in slab ``r // slab_blocks`` at row ``r % slab_blocks`` (the pool's ``_slab_for_row``).
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pool.kernels.tuning import DEFAULT_TUNING, KernelTuning
from pool.limits import INDEX_LIMIT, index_range_problem

SUPPORTED_DTYPES = frozenset({"float16", "bfloat16"})
SUPPORTED_HEAD_DIMS = frozenset({64, 128})
MAX_GROUP = 8                 # query heads per KV head held in registers (q and acc: 2 * 8 * 8 floats per lane)
META_HEADER = 4               # slab_blocks, table_stride, chunk_tokens, scale_bits
# Largest K/V tensor (elements) a launch accepts: the decision rule's limit (pool/fused_decision.py rule 6), checked
# again at the entry so no caller reaches the kernel past it. The kernels' own offsets are 64-bit (docs/sizing.md);
# the limit stands until a GPU test past it (tests/gpu/test_index_range_gpu.py) has passed on every backend.
MAX_SLAB_ELEMENTS = INDEX_LIMIT - 1
MAX_META_VALUE = 2**31 - 1    # meta is int32: physical rows and token positions must stay below it


class KernelUnsupported(ValueError):
    """The fused kernel cannot run this configuration; the message is the reason (callers fall back to gather)."""


@dataclass(frozen=True)
class DecodePlan:
    """One launch: the int32 meta array, the split layout and the geometry it was planned for."""

    meta: np.ndarray          # int32, layout in the module docstring
    batch: int
    num_splits: int
    chunk_tokens: int
    max_blocks: int
    num_slabs: int
    slab_blocks: int
    block_size: int
    tuning: KernelTuning = DEFAULT_TUNING  # the knobs it was planned with; the launch takes its unroll from here


def tokens_per_warp_step(head_dim: int) -> int:
    """Tokens one warp reads per step: each token's row is split over head_dim / 8 lanes (16-byte loads)."""
    return 32 // (head_dim // 8)


def unsupported_reason(*, dtype: str, head_dim: int, n_q_heads: int, n_kv_heads: int, block_size: int,
                       num_slabs: int, max_slabs: int, slab_elements: int = 0) -> str | None:
    """Why the fused kernel cannot run this geometry, or None when it can. ``slab_elements``: elements of one K
    (or V) slab tensor."""
    if dtype not in SUPPORTED_DTYPES:
        return f"dtype {dtype} unsupported by the fused kernel (float16, bfloat16)"
    if head_dim not in SUPPORTED_HEAD_DIMS:
        return f"head_dim {head_dim} unsupported by the fused kernel (64, 128)"
    if n_kv_heads < 1 or n_q_heads % n_kv_heads:
        return f"{n_q_heads} query heads are not a multiple of {n_kv_heads} KV heads"
    if n_q_heads // n_kv_heads > MAX_GROUP:
        return f"GQA group {n_q_heads // n_kv_heads} above the kernel's {MAX_GROUP}"
    if block_size % tokens_per_warp_step(head_dim):
        return f"block_size {block_size} not a multiple of {tokens_per_warp_step(head_dim)} tokens per warp step"
    if num_slabs > max_slabs:
        return f"{num_slabs} slabs above the kernel's {max_slabs} slab inputs"
    return index_range_problem(slab_elements, "one K/V tensor exceeds the fused kernel's index range",
                               MAX_SLAB_ELEMENTS)


def slab_bucket(num_slabs: int) -> int:
    """Number of slab inputs a kernel is compiled for: the smallest of 1, 2, 4, 8 and then 2^k, 1.25 * 2^k,
    1.5 * 2^k (10, 12, 16, 20, 24, 32, 40, ...) that holds ``num_slabs`` (padding repeats slab 0, never read).

    Every kernel input costs host time at each launch (MLX converts, checks and records each one; a decode step
    launches once per layer), so padding stays under a third of the real slabs (beyond 8), while a growing pool
    still compiles O(log slabs) variants (three per doubling) instead of one per slab count."""
    bucket = 1
    while bucket < min(num_slabs, 8):
        bucket *= 2
    if num_slabs <= bucket:
        return bucket
    power = 8
    while True:
        for step in (power + power // 4, power + power // 2, 2 * power):
            if num_slabs <= step:
                return step
        power *= 2


def choose_splits(max_end: int, batch: int, n_kv_heads: int, block_size: int,
                  tuning: KernelTuning = DEFAULT_TUNING) -> tuple[int, int]:
    """(num_splits, chunk_tokens): about ``tuning.target_blocks`` (batch x kv-head x split) blocks, to fill the GPU
    in several waves (a last partial wave idles SMs), in chunks a multiple of block_size and at least
    ``tuning.min_chunk_tokens`` tokens (unless the whole context is shorter)."""
    if max_end <= 0:
        return 1, block_size
    wanted = -(-tuning.target_blocks // max(1, batch * n_kv_heads))
    most = max(1, -(-max_end // tuning.min_chunk_tokens))
    splits = max(1, min(wanted, most))
    chunk = -(-max_end // splits)
    chunk = -(-chunk // block_size) * block_size
    return -(-max_end // chunk), chunk


def scale_bits(scale: float) -> int:
    """The float32 bit pattern of ``scale`` as a signed int32 (what the kernels' ``__int_as_float`` reads)."""
    return struct.unpack("<i", struct.pack("<f", float(scale)))[0]


def plan_decode(block_tables: Sequence[Sequence[int]], seq_ends: Sequence[int], seq_starts: Sequence[int] | None,
                *, block_size: int, slab_blocks: int, num_slabs: int, n_kv_heads: int, scale: float,
                num_splits: int | None = None, tuning: KernelTuning = DEFAULT_TUNING) -> DecodePlan:
    """Plan one launch over ``len(block_tables)`` sequences. Sequence i attends to positions
    ``[seq_starts[i], seq_ends[i])`` whose blocks are ``block_tables[i][p // block_size]`` (physical rows).
    ``tuning`` sets the splits (unless ``num_splits`` forces them) and, carried by the plan, the launch's unroll.
    Raises KernelUnsupported for tables that do not cover their ends or hold rows outside the slabs."""
    batch = len(block_tables)
    if batch == 0 or len(seq_ends) != batch or (seq_starts is not None and len(seq_starts) != batch):
        raise KernelUnsupported("block_tables, seq_ends and seq_starts must be non-empty and of equal length")
    starts = [0] * batch if seq_starts is None else [int(s) for s in seq_starts]
    ends = [int(e) for e in seq_ends]
    counts = [len(t) for t in block_tables]
    for i, (count, start, end) in enumerate(zip(counts, starts, ends)):
        if not 0 <= start < end:
            raise KernelUnsupported(f"sequence {i}: visible range [{start}, {end}) is empty or negative")
        if count * block_size < end:
            raise KernelUnsupported(f"sequence {i}: {count} blocks cannot cover {end} tokens")
    # One C-level conversion of all rows (a per-row Python loop costs ~1 ms at 16 x 512 blocks).
    flat = np.fromiter(itertools.chain.from_iterable(block_tables), dtype=np.int64, count=sum(counts))
    capacity = num_slabs * slab_blocks
    if capacity - 1 > MAX_META_VALUE or max(ends) > MAX_META_VALUE:
        raise KernelUnsupported(f"{capacity:,} rows / {max(ends):,} tokens do not fit the plan's int32 entries")
    if flat.size and (flat.min() < 0 or flat.max() >= capacity):
        raise KernelUnsupported(f"a block-table row is outside the {capacity} rows of the slabs")
    max_blocks = max(1, max(counts))
    if num_splits is None:
        splits, chunk = choose_splits(max(ends), batch, n_kv_heads, block_size, tuning)
    else:
        chunk = -(-max(ends) // max(1, num_splits))
        chunk = -(-chunk // block_size) * block_size
        splits = -(-max(ends) // chunk)
    meta = np.zeros(META_HEADER + 2 * batch + batch * max_blocks, dtype=np.int32)
    meta[:META_HEADER] = (slab_blocks, max_blocks, chunk, scale_bits(scale))
    meta[META_HEADER:META_HEADER + 2 * batch:2] = starts
    meta[META_HEADER + 1:META_HEADER + 2 * batch:2] = ends
    table_view = meta[META_HEADER + 2 * batch:].reshape(batch, max_blocks)
    if flat.size:
        columns = np.arange(max_blocks)
        table_view[columns[None, :] < np.array(counts)[:, None]] = flat
    return DecodePlan(meta=meta, batch=batch, num_splits=splits, chunk_tokens=chunk, max_blocks=max_blocks,
                      num_slabs=num_slabs, slab_blocks=slab_blocks, block_size=block_size, tuning=tuning)
