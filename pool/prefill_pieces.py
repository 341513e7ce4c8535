"""Where a prefill chunk's history lies in the slabs: pieces of consecutive rows of one slab (plain Python).

A chunk writing tokens ``[start, start + n)`` attends to the history ``[logical_start, start)`` plus its own
tokens. The history's blocks are ``rows[logical_start // bs : ceil(start / bs)]``; consecutive rows that sit next
to each other in one slab (``row // rows_per_slab`` equal, local rows ascending by one) form one piece, which the
paged route reads as one slab slice (a view: no copy). A piece is maximal, so adjacent runs are already merged; a
row out of order starts a new piece (a fragmented table yields more pieces, never a copy).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence


class Piece(NamedTuple):
    """Slab ``slab``, its rows ``[first_row, first_row + num_rows)``, and within those rows' tokens (flattened,
    token 0 = first token of ``first_row``) the history tokens ``[lo, hi)``."""

    slab: int
    first_row: int
    num_rows: int
    lo: int
    hi: int

    @property
    def tokens(self) -> int:
        return self.hi - self.lo


def history_pieces(rows: Sequence[int], logical_start: int, start: int, block_size: int,
                   rows_per_slab: int) -> list[Piece]:
    """The pieces holding tokens ``[logical_start, start)`` of a table with ``rows`` (logical order), in token
    order; [] when there is no history. ``rows_per_slab``: rows of one storage tensor (monolithic: its capacity)."""
    if start <= logical_start:
        return []
    first_block = logical_start // block_size
    blocks = rows[first_block:-(-start // block_size)]
    pieces: list[Piece] = []
    token = first_block * block_size  # absolute position of the current block's first token
    for row in blocks:
        slab, local = divmod(row, rows_per_slab)
        lo = max(logical_start - token, 0)
        hi = min(start - token, block_size)
        last = pieces[-1] if pieces else None
        if last is not None and last.slab == slab and last.first_row + last.num_rows == local \
                and last.hi == last.num_rows * block_size and lo == 0:
            pieces[-1] = Piece(slab, last.first_row, last.num_rows + 1, last.lo, last.num_rows * block_size + hi)
        else:
            pieces.append(Piece(slab, local, 1, lo, hi))
        token += block_size
    return pieces
