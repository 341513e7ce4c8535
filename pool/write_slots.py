"""Where a step's writes land, resolved once for every layer (plain data, no mlx).

A step writes the same positions of the same sequences in every layer of the model, and every layer holds a row at
the same index (one row space). So the rows a step writes are resolved once, right after its ``prepare_write``
calls: ``resolve_write_slots`` checks every span was prepared and is exclusively owned (a shared block must have
been copied on write first) and returns ``WriteSlots``; each layer's ``PagedKVPool.write`` then only executes.
Storage adds what the writes touch (tensors, rows in them, device index arrays) to ``WriteSlots.layout`` at the
first layer's write and the other layers reuse it. ``version`` is the book's row version at resolution time, so a
write through stale slots (rows changed since: a release, a copy-on-write, a shrink) is refused instead of landing
in someone else's row.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

from pool.errors import PoolError


@dataclass(frozen=True)
class WriteSlots:
    """Targets of ``num_tokens`` tokens per sequence: sequence ``seq_ids[i]`` writes positions
    ``[starts[i], starts[i] + num_tokens)``, which lie in the blocks on rows ``rows[i]`` (logical order)."""

    seq_ids: tuple[int, ...]
    starts: tuple[int, ...]
    num_tokens: int
    rows: tuple[tuple[int, ...], ...]
    version: int
    layout: dict = field(default_factory=dict, compare=False, repr=False)  # storage's, for the step's layers


def resolve_write_slots(book, seq_ids, starts, num_tokens: int) -> WriteSlots:
    """Check every (sequence, span) is prepared and exclusively owned and return the rows. Reads ``book`` only;
    PoolError names the first problem."""
    seq_ids, starts = tuple(seq_ids), tuple(_position(start) for start in starts)
    if not seq_ids or len(seq_ids) != len(starts):
        raise PoolError("write slots need one start per sequence (and at least one sequence)")
    if len(set(seq_ids)) != len(seq_ids):
        raise PoolError(f"write slots: a sequence appears twice in {list(seq_ids)}")
    if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or num_tokens < 1:
        raise PoolError(f"num_tokens must be an int >= 1, got {num_tokens!r}")
    if num_tokens == 1:
        rows = _token_rows(book, seq_ids, starts)
    else:
        rows = tuple(tuple(book.written_rows(seq_id, start, num_tokens)) for seq_id, start in zip(seq_ids, starts))
    return WriteSlots(seq_ids, starts, num_tokens, rows, book.version)


def _position(value) -> int:
    """An int start (NumPy and MLX integer scalars included); PoolError for anything else."""
    if isinstance(value, bool):
        raise PoolError(f"a write start must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise PoolError(f"a write start must be an int, got {value!r}") from None


def _token_rows(book, seq_ids: tuple[int, ...], starts: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """One token per sequence (a decode step): the row of each target block, checked like ``written_rows``
    without building a span per sequence."""
    bs, counts = book.block_size, book.row_refcount
    out = []
    for seq_id, pos in zip(seq_ids, starts):
        table = book.table(seq_id)
        if pos < 0 or pos >= table.length:
            raise PoolError(f"sequence {seq_id}: position {pos!r} is not prepared (length {table.length}); "
                            "call prepare_write first")
        row = table.rows[pos // bs]
        if counts[row] != 1:
            raise PoolError(f"the target block of sequence {seq_id} is shared; prepare_write copies it on write "
                            "and must come first")
        out.append((row,))
    return tuple(out)


def check_current(book, slots: WriteSlots) -> None:
    """PoolError when the book's rows changed since ``slots`` were resolved."""
    if book.version != slots.version:
        raise PoolError("write slots are stale (rows changed since they were resolved)")
