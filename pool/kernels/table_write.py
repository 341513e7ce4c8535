"""A step's new tokens stored into the slabs in place, through the layer's slab table: one launch per layer at any
slab count (a decode step's token per sequence, or a prefill chunk's tokens).

MLX's own write of a decode step (``RowStorage.write``) is one scatter per slab the step's tail blocks sit in, K and
V, plus the gather that picks each slab's tokens; a scatter gives the slab a new array, so the slab table must then
be refreshed (one more launch, its stamps compared). At 8 rows per slab a batch of 16 spans 2-4 slabs: measured on the
H200 (16 x 8k burst, ``lab/decode_step/engine_anatomy.py``), the decode step built in 8.3 ms and encoded in 12.6 against
5.6 and 8.7 at 128 rows per slab. A prefill chunk's MLX write is one slice update per run of full blocks on
consecutive rows of one slab and one per partial block, K and V, after a copy of the chunk to the slabs' layout:
~10 operations a layer for a batched chunk of the burst, the step's heaviest host work after the model's own (CUDA
route's host side on the CPU, ``lab/prefill_host``). This route makes the write one kernel (``WriteKernel``) that
takes the refreshed table, ``meta`` (int32 ``[slab_blocks, B, table length, tokens, rows per sequence, first
positions..., rows...]``) and the tokens, stores them at the addresses the table holds, and returns a copy of the
table; the storage's table for the layer becomes that copy (``SlabTables.replace``), so the step's reader through
the table (the decode kernel, the table gather), which takes it as input, runs after the write.

When writing behind MLX's back is safe, and what this route relies on:

* The slab arrays keep their buffers (nothing is assigned), so no stamp moves and no entry goes stale.
* Every reader in the same step reads through the table the write returned: the route is taken only for a layer
  whose attention is the fused kernel on the table route or whose history the table gather reads
  (``PagedKVPool.write(..., through_table=True)``, which ``PagedStep`` passes for those layers; a prefill chunk that
  reads nothing, its first, too). A layer that gathers through MLX operations is written by MLX.
* Later readers through MLX operations (a gather, a copy-on-write, a shrink's move, a later MLX write that
  copies the slab) are built in later graphs and MLX runs one stream in order, so they run after the write.

The CPU emulation (``table_write_emulated.py``) writes into the slab the table entry holds and, only when that entry
is current, into the storage's slab (as a stale address on the GPU would write a buffer nobody reads). CUDA:
``table_write_cuda.py``. ``SLABSCOPE_TABLE_WRITE=0`` keeps MLX's writes. Imports mlx inside functions only.
"""

from __future__ import annotations

import os
from typing import Protocol

from pool.kernels.slab_table import slab_tables

WRITE_ENV = "SLABSCOPE_TABLE_WRITE"
META_HEADER = 5  # slab_blocks, batch, table length, tokens per sequence, rows per sequence

# backend -> factory of its write kernel (``for_process()``, ``supports(dtype)``); tests register the emulation
WRITE_KERNELS: dict = {}


class WriteKernel(Protocol):
    def supports(self, dtype: str) -> bool: ...

    def ready(self, storage) -> bool:
        """Whether it can launch now (a build it needs may still run: the caller writes with MLX meanwhile)."""

    def __call__(self, storage, layer: int, table, meta, keys, values):
        """The table after the tokens ([B, tokens, n_kv, head_dim]) are stored where ``meta`` says, through
        ``table``."""


def write_enabled(environ: dict | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(WRITE_ENV, "1").strip() != "0"


def write_meta(slot_rows, starts, tokens: int, block_size: int, slab_blocks: int, table_len: int) -> list[int]:
    """The launch's meta: header, each sequence's first token's position in its first block, then each sequence's
    rows from that block on (``slot_rows``), padded to one count with its last row (never read: a token past the
    sequence's own blocks does not exist)."""
    seq_blocks = max(len(rows) for rows in slot_rows)
    padded = [row for rows in slot_rows for row in (*rows, *[rows[-1]] * (seq_blocks - len(rows)))]
    return [int(slab_blocks), len(slot_rows), int(table_len), int(tokens), seq_blocks,
            *(int(s) % block_size for s in starts), *padded]


class TableWriteRoute:
    """What ``PagedKVPool.write(..., through_table=True)`` calls. Mutates the storage's table state (the layer's
    table becomes the write's output) and, when MLX runs the launch, the slabs' contents; the step's
    ``WriteSlots.layout`` keeps the meta array for the other layers."""

    def __init__(self, table_kernel, write_kernel: WriteKernel):
        self.table_kernel = table_kernel
        self.write_kernel = write_kernel
        self.launches = 0

    def supports(self, storage) -> bool:
        """A slab storage of a dtype the kernel takes, and the kernel ready (else MLX's write)."""
        return (storage.design == "slab" and self.write_kernel.supports(storage.geometry.dtype)
                and self.write_kernel.ready(storage))

    def write(self, storage, layer: int, slots, keys, values) -> None:
        """Store ``keys``/``values`` ([B, tokens, n_kv, head_dim]) at ``slots`` in ``layer``."""
        import mlx.core as mx

        geometry = storage.geometry
        kernel = self.table_kernel
        tables = slab_tables(storage, kernel.name, lambda: kernel.writer(geometry.dtype))
        table = tables.table(storage, layer)
        table_len = 2 * tables.layers[layer].capacity
        memo = slots.layout.setdefault("table_write", {})
        meta = memo.get(table_len)
        if meta is None:
            meta = memo[table_len] = mx.array(write_meta(slots.rows, slots.starts, slots.num_tokens,
                                                         storage.block_size, storage.slab_blocks, table_len),
                                              dtype=mx.int32)
        written = self.write_kernel(storage, layer, table, meta, keys, values)
        tables.replace(layer, written)
        self.launches += 1


def write_route(backend: str | None, environ: dict | None = None) -> TableWriteRoute | None:
    """The table write of ``backend`` (None: MLX's writes): needs its table kernel and a write kernel, and
    ``SLABSCOPE_TABLE_WRITE`` not 0."""
    from pool.kernels.table_kernel_build import table_route_kernels

    if backend is None or not write_enabled(environ):
        return None

    def cuda_class():
        from pool.kernels.table_write_cuda import CudaTableWrite

        return CudaTableWrite

    found = table_route_kernels(backend, WRITE_KERNELS, cuda_class)
    return None if found is None else TableWriteRoute(*found)
