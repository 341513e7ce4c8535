"""Pool statistics and counters (plain data).

``PoolStats`` and ``PoolCounters`` are frozen typed records (they travel inside snapshots and recordings);
``BookCounters`` is the bookkeeping's own mutable tally (it travels inside ``pool.book_state.BookState``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import msgspec


class PoolStats(msgspec.Struct, frozen=True):
    """Block and byte totals over all layers.

    allocated_blocks: physical rows ever minted (live + reusable free rows); live_blocks: blocks with refcount > 0;
    free_blocks: minted rows on free lists (reusable before new rows are minted) = allocated - live;
    bytes_reserved: storage capacity (summed over slabs, K+V); bytes_in_use: rows of live blocks (K+V).
    A live pool measures both byte figures on its storage; a book alone (replay, what-if) models them as rows x
    ``bytes_per_row`` (``PagedKVPool.check_integrity`` checks the two agree).
    """

    allocated_blocks: int
    live_blocks: int
    free_blocks: int
    bytes_reserved: int
    bytes_in_use: int
    num_sequences: int
    num_handles: int

    def to_dict(self) -> dict:
        return msgspec.structs.asdict(self)


class PoolCounters(msgspec.Struct, frozen=True):
    """What the pool did since it was built, summed over layers.

    slab_appends / grow_events / bytes_copied: growth (measured by storage in a live pool; modelled by the book in
    a replay); cow_copies, rows_minted, rows_reused: bookkeeping; gathers, gather_runs_total: reads;
    fused_decisions / gather_decisions: fused paged-decode decisions by outcome.
    """

    slab_appends: int = 0
    grow_events: int = 0
    bytes_copied: int = 0
    cow_copies: int = 0
    rows_minted: int = 0
    rows_reused: int = 0
    gathers: int = 0
    gather_runs_total: int = 0
    fused_decisions: int = 0
    gather_decisions: int = 0

    def to_dict(self) -> dict:
        return msgspec.structs.asdict(self)


@dataclass
class BookCounters:
    """What the bookkeeping did, summed over layers. ``slab_appends``/``grow_events``/``bytes_copied`` here are the
    *modelled* growth (from the capacity arithmetic and ``bytes_per_row``); storage keeps the measured ones."""

    rows_minted: int = 0
    rows_reused: int = 0
    rows_freed: int = 0
    cow_copies: int = 0
    blocks_created: int = 0
    slab_appends: int = 0
    grow_events: int = 0
    bytes_copied: int = 0

    def to_dict(self) -> dict:
        return asdict(self)
