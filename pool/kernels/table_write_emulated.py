"""The table write on the CPU: what ``table_write_cuda``'s kernel does, through the emulated slab table
(``paged_decode_emulated.EmulatedTable``: entry ``s`` holds slab ``s``'s K and V as they were when written).

Same index arithmetic as the kernel: sequence ``b``'s token ``t`` goes to block position ``p = meta[5 + b] + t`` of
its rows, row ``meta[5 + B + b * seq_blocks + p // block_size]`` (slab ``row // slab_blocks``, row ``row %
slab_blocks``) at position ``p % block_size``. The kernel writes the buffer the entry
points at; the emulation writes the entry's slab and, only when that entry holds the storage's current contents
(an entry that is current points at the storage's buffer), the storage's slab too, without a stamp (its buffer,
on the GPU, does not change). A stale entry's write is lost to every reader but the table, as on the GPU. Tests
register it in ``table_write.WRITE_KERNELS`` for a pretend backend. Imports mlx inside functions only.
"""

from __future__ import annotations

import numpy as np

from pool.kernels.paged_decode_emulated import EmulatedTable
from pool.kernels.plan import KernelUnsupported
from pool.kernels.table_write import META_HEADER


class EmulatedTableWrite:
    """``table_write.WriteKernel`` of the emulation."""

    @classmethod
    def for_process(cls) -> "EmulatedTableWrite":
        return cls()

    @staticmethod
    def supports(dtype: str) -> bool:
        return True

    @staticmethod
    def ready(storage) -> bool:
        return True

    def __call__(self, storage, layer: int, table, meta, keys, values):
        import mlx.core as mx

        header = np.asarray(meta)
        slab_blocks, batch, table_len, tokens, seq_blocks = (int(x) for x in header[:META_HEADER])
        if (batch, tokens) != tuple(keys.shape[:2]) or table_len != 2 * len(table):
            raise KernelUnsupported(f"meta says {batch} x {tokens} tokens and a table of {table_len} entries, the "
                                    f"launch {tuple(keys.shape[:2])} and {2 * len(table)}")
        firsts = header[META_HEADER:META_HEADER + batch].astype(np.int64)
        table_rows = header[META_HEADER + batch:META_HEADER + batch + batch * seq_blocks].astype(np.int64)
        p = (firsts[:, None] + np.arange(tokens)[None, :]).reshape(-1)  # [B x tokens], sequence after sequence
        b = np.repeat(np.arange(batch), tokens)
        rows, positions = table_rows.reshape(batch, seq_blocks)[b, p // storage.block_size], p % storage.block_size
        flat_keys = keys.reshape(batch * tokens, *keys.shape[2:])
        flat_values = values.reshape(batch * tokens, *values.shape[2:])
        slab, local = rows // slab_blocks, rows % slab_blocks
        entries = list(table)
        for s in np.unique(slab).tolist():
            if entries[s] is None:
                raise KernelUnsupported(f"the table has no address for slab {s} (a write through it would fault)")
            picked = np.flatnonzero(slab == s)
            rows_at = mx.array(local[picked].astype(np.int32))
            positions_at = mx.array(positions[picked].astype(np.int32))
            where = mx.array(picked.astype(np.int32))
            old_k, old_v = entries[s]
            current = (mx.array_equal(old_k, storage.keys[layer][s]).item()
                       and mx.array_equal(old_v, storage.values[layer][s]).item())
            new_k, new_v = mx.array(old_k), mx.array(old_v)
            new_k[rows_at, :, positions_at] = flat_keys[where]  # head-major slab: every head of the token
            new_v[rows_at, :, positions_at] = flat_values[where]
            entries[s] = (new_k, new_v)
            if current:
                storage.keys[layer][s], storage.values[layer][s] = mx.array(new_k), mx.array(new_v)
        return EmulatedTable(entries)
