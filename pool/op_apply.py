"""Re-executing sequence-level ops (from an op listener or a recording) on a :class:`pool.BlockBook` (no mlx).

A what-if replay builds a fresh BlockBook with other geometry (block size, slab size, design, budget) and feeds it
the recorded sequence-level ops; derived ops are consequences it recomputes, so they are skipped here. Handle ids in
the log are the recording's; ``handles`` maps them to the replaying book's handles.
"""

from __future__ import annotations

from pool.block_table import PrefixHandle
from pool.errors import PoolError

SEQUENCE_OPS = frozenset({"add_sequence", "prepare_write", "release", "clone", "detach", "adopt",
                          "release_handle", "trim", "set_slab_blocks", "set_logical_start"})
DERIVED_OPS = frozenset({"row_mint", "cow", "slab_append", "grow", "rows_freed", "storage_init", "copied"})


def apply_op(book, op: dict, handles: dict[int, PrefixHandle]) -> bool:
    """Apply one op to ``book``; returns False for derived ops (ignored). Mutates ``book`` and ``handles``.

    ``storage_init`` is the exception among derived ops: it sets the replay's ``bytes_per_row`` so modelled byte
    figures match, unless the replay fixed its own geometry (``book.geometry`` already set).
    """
    name = op.get("op")
    if name == "storage_init":
        if book.geometry is None:
            book.set_geometry(op["dtype"], op["n_kv_heads"], op["head_dim"], op["bytes_per_row"])
        return False
    if name in DERIVED_OPS:
        return False
    if name not in SEQUENCE_OPS:
        raise PoolError(f"unknown pool op {name!r}")
    if name == "detach":
        handles[op["handle"]] = book.detach(op["seq"])
    elif name == "adopt":
        book.adopt(_handle(handles, op["handle"]), op["seq"])
    elif name == "release_handle":
        book.release_handle(_handle(handles, op["handle"]))
        del handles[op["handle"]]
    else:
        _apply_plain(book, name, op)
    return True


def _apply_plain(book, name: str, op: dict) -> None:
    if name == "add_sequence":
        book.add_sequence(op["seq"])
    elif name == "prepare_write":
        book.prepare_write(op["seq"], op["start"], op["num_tokens"])
    elif name == "release":
        book.release(op["seq"])
    elif name == "clone":
        book.clone(op["src"], op["dst"], op["num_tokens"])
    elif name == "trim":
        book.trim(op["seq"], op["num_tokens"])
    elif name == "set_slab_blocks":
        book.set_slab_blocks(op["slab_blocks"])
    elif name == "set_logical_start":
        book.set_logical_start(op["seq"], op["logical_start"])


def _handle(handles: dict[int, PrefixHandle], recorded_id: int) -> PrefixHandle:
    try:
        return handles[recorded_id]
    except KeyError:
        raise PoolError(f"op log refers to handle {recorded_id} that was never detached in this replay") from None
