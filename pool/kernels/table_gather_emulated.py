"""The table gather on the CPU: what ``table_gather_cuda``'s kernel computes, through the emulated slab table
(``paged_decode_emulated.EmulatedTable``: entry ``s`` holds slab ``s``'s K and V as they were when the entry was
written, so a stale entry reads stale data as a stale device address would; an entry never written reads NaN).

Same index arithmetic as the kernel, vectorised over tokens: token ``lo + t`` -> block ``(lo + t) // block_size``
-> physical row ``meta[3 + block]`` -> (slab ``row // slab_blocks``, row ``row % slab_blocks``, position
``(lo + t) % block_size``). Tests register it in ``table_gather.GATHER_KERNELS`` for a pretend backend. Imports
mlx inside functions only.
"""

from __future__ import annotations

import numpy as np

from pool.kernels.plan import KernelUnsupported
from pool.kernels.table_gather import META_HEADER


class EmulatedTableGather:
    """``table_gather.GatherKernel`` of the emulation."""

    @classmethod
    def for_process(cls) -> "EmulatedTableGather":
        return cls()

    @staticmethod
    def supports(dtype: str) -> bool:
        return True

    @staticmethod
    def ready(storage) -> bool:
        return True

    def __call__(self, table, meta, *, tokens: int, n_kv: int, head_dim: int, block_size: int, dtype):
        import mlx.core as mx

        header = np.asarray(meta)
        lo, n, slab_blocks = (int(x) for x in header[:META_HEADER])
        if n != tokens:
            raise KernelUnsupported(f"meta says {n} tokens, the launch {tokens}")
        token = lo + np.arange(n)
        rows = header[META_HEADER + token // block_size].astype(np.int64)
        slab = rows // slab_blocks
        local = rows - slab * slab_blocks
        position = token % block_size
        out_k = mx.full((n, n_kv, head_dim), float("nan"), dtype=dtype)
        out_v = mx.full((n, n_kv, head_dim), float("nan"), dtype=dtype)
        for s in np.unique(slab).tolist():
            if s >= len(table):
                raise KernelUnsupported(f"slab table of {len(table)} entries read at slab {s}")
            entry = table[s]
            if entry is None:
                continue  # never written: stays NaN
            picked = np.flatnonzero(slab == s)
            where = mx.array(picked.astype(np.int32))
            rows_at = mx.array(local[picked].astype(np.int32))
            positions_at = mx.array(position[picked].astype(np.int32))
            out_k[where] = entry[0][rows_at, :, positions_at]  # head-major slab: [n, n_kv, D] (numpy's order)
            out_v[where] = entry[1][rows_at, :, positions_at]
        return mx.contiguous(out_k.transpose(1, 0, 2)), mx.contiguous(out_v.transpose(1, 0, 2))
