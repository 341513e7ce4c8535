"""The table gather on the CPU: what ``table_gather_cuda``'s kernel computes, through the emulated slab table
(``paged_decode_emulated.EmulatedTable``: entry ``s`` holds slab ``s``'s K and V as they were when the entry was
written, so a stale entry reads stale data as a stale device address would; an entry never written reads NaN).

Same index arithmetic as the kernel, vectorised over tokens: token ``lo + t`` of sequence ``b`` -> block
``(lo + t) // block_size`` -> physical row ``meta[5 + b * seq_blocks + block]`` -> (slab ``row // slab_blocks``, row
``row % slab_blocks``, position ``(lo + t) % block_size``). Tests register it in ``table_gather.GATHER_KERNELS``
for a pretend backend. Imports mlx inside functions only.
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

    def __call__(self, table, meta, *, tokens: int, n_kv: int, head_dim: int, block_size: int, dtype,
                 batch: int = 1):
        import mlx.core as mx

        header = np.asarray(meta)
        lo, n, slab_blocks, count, seq_blocks = (int(x) for x in header[:META_HEADER])
        if n != tokens or count != batch:
            raise KernelUnsupported(f"meta says {count} x {n} tokens, the launch {batch} x {tokens}")
        token = lo + np.arange(n)
        out_k = mx.full((batch, n, n_kv, head_dim), float("nan"), dtype=dtype)
        out_v = mx.full((batch, n, n_kv, head_dim), float("nan"), dtype=dtype)
        for b in range(batch):
            rows = header[META_HEADER + b * seq_blocks + token // block_size].astype(np.int64)
            self._read(table, out_k, out_v, b, rows // slab_blocks, rows % slab_blocks, token % block_size)
        return mx.contiguous(out_k.transpose(0, 2, 1, 3)), mx.contiguous(out_v.transpose(0, 2, 1, 3))

    @staticmethod
    def _read(table, out_k, out_v, b: int, slab, local, position) -> None:
        """Sequence ``b``'s tokens t (slab[t], row local[t], position[t]) into out_k/out_v[b, t] ([n, n_kv, D])."""
        import mlx.core as mx

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
            out_k[b, where] = entry[0][rows_at, :, positions_at]  # head-major slab: [n, n_kv, D] (numpy's order)
            out_v[b, where] = entry[1][rows_at, :, positions_at]
