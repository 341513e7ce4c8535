"""Pool statistics and counters (plain data)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class PoolStats:
    """Block and byte totals over all layers.

    allocated_blocks: physical rows ever minted (live + reusable free rows); live_blocks: blocks with refcount > 0;
    free_blocks: minted rows on free lists (reusable before new rows are minted) = allocated - live;
    bytes_reserved: real storage capacity (summed over slabs, K+V); bytes_in_use: rows of live blocks (K+V).
    """

    allocated_blocks: int
    live_blocks: int
    free_blocks: int
    bytes_reserved: int
    bytes_in_use: int
    num_sequences: int
    num_handles: int

    def to_dict(self) -> dict:
        return asdict(self)


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


@dataclass
class PoolBytes:
    """The pool's bytes *now*, kept current by the bookkeeping at every row and capacity change, so the memory
    sampler can read them at any instant (plain ints: another thread reads them without a lock; a read between
    two updates of one operation is at most that operation stale). Only layers that have storage count (a layer
    gets storage, and its K+V bytes per row, at its first write), as in :meth:`pool.PagedKVPool.stats`."""

    live: int = 0      # rows of live blocks x K+V bytes per row (= PoolStats.bytes_in_use)
    reserved: int = 0  # reserved capacity x K+V bytes per row (= PoolStats.bytes_reserved)
    slabs: int = 0     # slabs (slab design) or 32-block grow chunks (monolithic) of that capacity, over layers
