"""Per-sequence, per-layer block tables and prefix handles (plain data, no mlx)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BlockTable:
    """One sequence's blocks in one layer, in logical order.

    ``block_ids[i]`` covers tokens ``[i*block_size, (i+1)*block_size)``; ``rows[i]`` is that block's physical row
    (kept alongside the id so gathers and snapshots never look rows up). Visible tokens are
    ``[logical_start, length)``.
    """

    block_ids: list[int] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    length: int = 0
    logical_start: int = 0

    def prefix(self, num_blocks: int, length: int, logical_start: int) -> "BlockTable":
        """A new table sharing (by id) the first ``num_blocks`` blocks of this one."""
        return BlockTable(self.block_ids[:num_blocks], self.rows[:num_blocks], length, logical_start)


@dataclass(frozen=True)
class PrefixHandle:
    """A parked prefix: blocks pinned by the pool after :meth:`PagedKVPool.detach` (or built from restored blocks).

    The handle itself is only a ticket; the pool holds the blocks until :meth:`PagedKVPool.release_handle`.
    ``pool_id`` names the pool (book) that issued it: handle ids are small per-pool counters, so without it a
    ticket from one pool would name an unrelated handle of another; every pool refuses tickets it did not issue.
    """

    handle_id: int
    num_tokens: int
    logical_start: int = 0
    pool_id: str = ""
