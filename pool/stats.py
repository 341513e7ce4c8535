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

    slab_appends / grow_events: growth events counted by storage in a live pool (modelled by the book in a
    replay). bytes_copied / cow_bytes_copied: bytes copied by growth / copy-on-write, *measured* from MLX's
    allocator (pool/copy_meter.py; a replay rebuilds them from the recording's ``copied`` ops, a what-if has
    none); bytes_copied_model / cow_bytes_copied_model: the bookkeeping's arithmetic beside them (old rows x
    bytes per row per grow-by-copy; copy-on-write copies x bytes per row). All but ``bytes_copied`` are None where
    copies were not measured (a recording made before they were, a synthetic session): it is the model there.
    cow_copies, rows_minted, rows_reused: bookkeeping; gathers, gather_runs_total: reads; fused_decisions /
    gather_decisions: fused paged-decode decisions by outcome. Shrink (pool/shrink_types.py): slab_releases (slabs,
    monolithic: chunks, given back over layers), bytes_released (their K+V bytes), blocks_moved (row moves over
    layers), bytes_moved (measured from the allocator, like ``bytes_copied``) beside bytes_moved_model (moved rows,
    and a monolithic shrink's kept rows, x bytes per row). Recordings made before shrink existed read 0 there.
    prefill_/decode_bytes_gathered: K/V bytes copied to read the slabs (measured; None where not metered) beside
    their ``_model`` (shape-derived); prefill_paged_decisions / prefill_gather_decisions: prefill attention routes.
    """

    slab_appends: int = 0
    grow_events: int = 0
    bytes_copied: int = 0
    bytes_copied_model: int | None = None  # None (with the next two): copies not measured when recorded
    cow_bytes_copied: int | None = None
    cow_bytes_copied_model: int | None = None
    cow_copies: int = 0
    rows_minted: int = 0
    rows_reused: int = 0
    gathers: int = 0
    gather_runs_total: int = 0
    fused_decisions: int = 0
    gather_decisions: int = 0
    slab_releases: int = 0
    bytes_released: int = 0
    blocks_moved: int = 0
    bytes_moved: int = 0
    bytes_moved_model: int = 0
    # K/V bytes copied out of the slabs to read them, by phase (pool/gather_meter.py): measured from MLX's
    # allocator when the pool meters reads (None: not metered), and the shape-derived figure beside them (bytes of
    # the K/V the reads returned; a live pool always keeps it). Prefill attention route decisions
    # (pool/prefill_decision.py), counted per layer like the decode's. All None in a recording made before they
    # existed (and in a what-if: not replayed)
    prefill_bytes_gathered: int | None = None
    decode_bytes_gathered: int | None = None
    prefill_bytes_gathered_model: int | None = None
    decode_bytes_gathered_model: int | None = None
    prefill_paged_decisions: int | None = None
    prefill_gather_decisions: int | None = None

    def to_dict(self) -> dict:
        return msgspec.structs.asdict(self)


@dataclass
class BookCounters:
    """What the bookkeeping did, summed over layers (one row event counts once per layer: storage executes it in every
    layer; so every figure is a multiple of ``num_layers``, which ``check_integrity`` checks).
    ``slab_appends``/``grow_events``/``bytes_copied`` here are the *modelled* growth (from the capacity arithmetic
    and ``bytes_per_row``); storage keeps the measured ones. Shrink: ``slab_releases`` (slabs or chunks given back),
    ``rows_released`` (minted rows dropped with them), ``bytes_released``, ``blocks_moved`` (row moves) and
    ``bytes_moved`` (modelled: moved rows plus a monolithic shrink's kept rows, x bytes per row).
    ``rows_minted_free``: rows minted free below an open block's row by an ``open_blocks="high"`` book
    (``RowBook._open_row``; a block taking one later counts in ``rows_reused``, the rows taken from the free list)."""

    rows_minted: int = 0
    rows_reused: int = 0
    rows_freed: int = 0
    cow_copies: int = 0
    blocks_created: int = 0
    slab_appends: int = 0
    grow_events: int = 0
    bytes_copied: int = 0
    slab_releases: int = 0
    rows_released: int = 0
    bytes_released: int = 0
    blocks_moved: int = 0
    bytes_moved: int = 0
    rows_minted_free: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PoolBytes:
    """The pool's bytes *now* (``PagedKVPool.bytes_now``), over all layers: what the memory sampler reads at any
    instant. Zero before the first write (no storage), as in :meth:`pool.PagedKVPool.stats`."""

    live: int = 0      # rows of live blocks x K+V bytes per row (= PoolStats.bytes_in_use)
    reserved: int = 0  # reserved capacity x K+V bytes per row (= PoolStats.bytes_reserved)
    slabs: int = 0     # slabs (slab design) or 32-block grow chunks (monolithic) of that capacity, over layers
