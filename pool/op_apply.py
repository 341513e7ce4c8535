"""Re-executing sequence-level ops (from an op listener or a recording) on a :class:`pool.BlockBook` (no mlx).

A what-if replay builds a fresh BlockBook with other geometry (block size, slab size, design, budget) and feeds it
the recorded sequence-level ops; derived ops are consequences it recomputes, so they are skipped here. Handle ids in
the log are the recording's; ``handles`` maps them to the replaying book's handles. A ``shrink`` point runs the
replaying book's shrink policy (the recorded one reproduces the recorded moves and releases exactly).
"""

from __future__ import annotations

from pool.block_table import PrefixHandle
from pool.errors import PoolError
from pool.ops import (Adopt, AddSequence, Clone, DerivedOp, Detach, Op, PrepareWrite, Release, ReleaseHandle,
                      Reserve, SequenceOp, SetLogicalStart, SetSlabBlocks, ShrinkTick, StorageInit, Trim)

SEQUENCE_OPS = frozenset(cls.__struct_config__.tag for cls in SequenceOp.__subclasses__())


def apply_op(book, op: Op, handles: dict[int, PrefixHandle]) -> bool:
    """Apply one op to ``book``; returns False for derived ops (ignored). Mutates ``book`` and ``handles``.

    ``StorageInit`` is the exception among derived ops: it sets the replay's ``bytes_per_row`` so modelled byte
    figures match, unless the replay fixed its own geometry (``book.geometry`` already set).
    """
    match op:
        case StorageInit(dtype=dtype, n_kv_heads=heads, head_dim=dim, bytes_per_row=bpr):
            if book.geometry is None:
                book.set_geometry(dtype, heads, dim, bpr)
            return False
        case DerivedOp():
            return False
        case AddSequence(seq=seq):
            book.add_sequence(seq)
        case PrepareWrite(seq=seq, start=start, num_tokens=n):
            book.prepare_write(seq, start, n)
        case Release(seq=seq):
            book.release(seq)
        case Clone(src=src, dst=dst, num_tokens=n):
            book.clone(src, dst, n)
        case Detach(seq=seq, handle=handle):
            handles[handle] = book.detach(seq)
        case Adopt(handle=handle, seq=seq):
            book.adopt(_handle(handles, handle), seq)
        case ReleaseHandle(handle=handle):
            book.release_handle(_handle(handles, handle))
            del handles[handle]
        case Trim(seq=seq, num_tokens=n):
            book.trim(seq, n)
        case SetSlabBlocks(slab_blocks=slab_blocks):
            book.set_slab_blocks(slab_blocks)
        case SetLogicalStart(seq=seq, logical_start=start):
            book.set_logical_start(seq, start)
        case Reserve(seqs=seqs, lengths=lengths):
            book.reserve(dict(zip(seqs, lengths)))
        case ShrinkTick():
            book.shrink()  # under the replaying book's own policy (a what-if may run another one)
        case _:
            raise PoolError(f"unknown pool op {op!r}")
    return True


def _handle(handles: dict[int, PrefixHandle], recorded_id: int) -> PrefixHandle:
    try:
        return handles[recorded_id]
    except KeyError:
        raise PoolError(f"op log refers to handle {recorded_id} that was never detached in this replay") from None
