"""Gathering a sequence's visible K/V through the layer's slab table: one launch per layer at any slab count.

A prefill chunk that does not read its history in place gathers every visible row of its sequence into a
contiguous [n_kv_heads, tokens, head_dim] pair per layer. The storage's own gather (``RowStorage.gather``) makes
two graph operations per same-slab run, so at 8 rows per slab a 12k-token sequence (54 runs) cost ~220 operations
per layer per chunk, and host time per operation is what a GPU prefill waits on. This route makes it one launch
(K and V together) plus the table refresh the decode kernel already does (``slab_table.SlabTables``, shared with
it: the same tables, refreshed once for both). The bytes copied are the same; what no longer depends on the slab
count is the number of operations.

A ``GatherKernel`` takes the layer's table, ``meta`` (int32 ``[lo, n, slab_blocks, batch, seq_blocks,
rows...]``: for each of ``batch`` sequences, tokens ``[lo, lo + n)`` of its ``seq_blocks`` physical rows, token 0
being the first of its first row) and the geometry, and returns K and V as ``[batch, n_kv, n, head_dim]``: a
batched prefill chunk reads every sequence's history in one launch straight into the layout attention takes
(``gather_batch``). CUDA: ``table_gather_cuda.CudaTableGather``; the CPU emulation (tests): ``table_gather_emulated``.
``SLABSCOPE_TABLE_GATHER=0`` keeps the storage's per-run gather (A/B); the route also needs the table route
(``SLABSCOPE_SLAB_TABLE``). Imports mlx inside functions only.
"""

from __future__ import annotations

import os
from typing import Protocol, Sequence

from pool.gather_runs import count_runs
from pool.kernels.slab_table import slab_tables

GATHER_ENV = "SLABSCOPE_TABLE_GATHER"
META_HEADER = 5  # lo, n, slab_blocks, batch, seq_blocks

# backend -> factory of its gather kernel (a class with ``for_process()`` and ``supports(dtype)``). Tests register
# the CPU emulation for a pretend backend, as they register its table kernel in ``paged_decode.TABLE_KERNELS``.
GATHER_KERNELS: dict = {}


class GatherKernel(Protocol):
    def supports(self, dtype: str) -> bool: ...

    def ready(self, storage) -> bool:
        """Whether it can launch now (a build it needs may still run: the caller gathers with MLX meanwhile)."""

    def __call__(self, table, meta, *, tokens: int, n_kv: int, head_dim: int, block_size: int, dtype,
                 batch: int = 1):
        """(K, V), each [batch, n_kv, tokens, head_dim] of ``dtype``, of the rows ``meta`` names, read through
        ``table``."""


def gather_enabled(environ: dict | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(GATHER_ENV, "1").strip() != "0"


def gather_meta(rows: Sequence[Sequence[int]], lo: int, hi: int, slab_blocks: int) -> list[int]:
    """The launch's meta: header (first token, token count, rows per slab, sequences, rows per sequence), then each
    sequence's physical rows (``rows``: one list per sequence, all of one length)."""
    seq_blocks = len(rows[0])
    if any(len(seq_rows) != seq_blocks for seq_rows in rows):
        raise ValueError("every sequence of a batched gather reads the same number of rows")
    return [int(lo), int(hi) - int(lo), int(slab_blocks), len(rows), seq_blocks,
            *(row for seq_rows in rows for row in seq_rows)]


class TableGatherRoute:
    """What ``PagedKVPool.gather_visible`` calls for a slab pool: refresh the layer's table, launch the gather.

    Owns a memo of (rows, lo, hi) -> (meta, runs): every layer of a chunk gathers the same rows (one row space),
    so the meta array and run count are built once per sequence of a chunk, not per layer; a batched chunk's
    sequences alternate within each layer, so the memo holds one entry per sequence (cleared past ``MEMO_SIZE``: a
    chunk's entries are never read again once its rows grow). Mutates the storage's table state (``kernel_state``);
    reads its slabs."""

    MEMO_SIZE = 256

    def __init__(self, table_kernel, gather_kernel: GatherKernel):
        self.table_kernel = table_kernel
        self.gather_kernel = gather_kernel
        self.launches = 0
        self._memo: dict[tuple, tuple] = {}

    def supports(self, storage) -> bool:
        """A slab storage of a dtype the kernel takes, and the kernel ready (else the storage's gather)."""
        return (storage.design == "slab" and self.gather_kernel.supports(storage.geometry.dtype)
                and self.gather_kernel.ready(storage))

    def gather(self, storage, layer: int, rows: list[int], lo: int, hi: int):
        """(K, V, same-slab runs) of tokens [lo, hi) of ``rows``, like ``RowStorage.gather``: [n_kv, hi - lo, D]."""
        keys, values, runs = self.gather_batch(storage, layer, [rows], lo, hi)
        return keys[0], values[0], runs[0]

    def gather_batch(self, storage, layer: int, rows: list[list[int]], lo: int, hi: int):
        """(K, V, same-slab runs per sequence) of tokens [lo, hi) of each sequence's ``rows``, in one launch: K and
        V as [B, n_kv, hi - lo, D]."""
        import mlx.core as mx

        from pool.storage_base import DTYPES

        key = (tuple(map(tuple, rows)), lo, hi, storage.slab_blocks)
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) >= self.MEMO_SIZE:
                self._memo.clear()
            meta = mx.array(gather_meta(rows, lo, hi, storage.slab_blocks), dtype=mx.int32)
            found = self._memo[key] = (meta, [count_runs(seq_rows, storage.slab_blocks) for seq_rows in rows])
        meta, runs = found
        geometry = storage.geometry
        kernel = self.table_kernel
        tables = slab_tables(storage, kernel.name, lambda: kernel.writer(geometry.dtype))
        table = tables.table(storage, layer)
        self.launches += 1
        keys, values = self.gather_kernel(table, meta, tokens=hi - lo, n_kv=geometry.n_kv_heads,
                                          head_dim=geometry.head_dim, block_size=storage.block_size,
                                          dtype=DTYPES[geometry.dtype], batch=len(rows))
        return keys, values, runs


def gather_route(backend: str | None, environ: dict | None = None) -> TableGatherRoute | None:
    """The table gather of ``backend`` (None: the storage's per-run gather): needs the backend's table kernel
    (``paged_decode.table_kernel``) and a gather kernel, and ``SLABSCOPE_TABLE_GATHER`` not 0."""
    from pool.kernels.table_kernel_build import table_route_kernels

    if backend is None or not gather_enabled(environ):
        return None

    def cuda_class():
        from pool.kernels.table_gather_cuda import CudaTableGather

        return CudaTableGather

    found = table_route_kernels(backend, GATHER_KERNELS, cuda_class)
    return None if found is None else TableGatherRoute(*found)
