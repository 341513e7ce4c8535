"""The bookkeeping's full state as a typed record, and back (plain data, no mlx).

A pool snapshot is a *view*: it lacks block ids, sequence lengths and handle tables, so a book cannot be rebuilt
from one. ``BlockBook.state()`` returns everything a book needs to continue executing ops exactly as before (the
keyframes of a recording carry it); ``BlockBook.from_state(state)`` builds that book again. As in mlx-lm's caches,
the object owns its serialisation: this module is the only place that reads or writes a book's private fields
for it.

The record holds the one row space once: the row arrays, free rows and capacity of the pool, and one table
(``[block_ids, rows, length, logical_start]``) per sequence and handle. Recordings of format v1 and v2 stored a copy
of all of it per layer; ``probes/legacy.py`` reads those through layer 0.
"""

from __future__ import annotations

import msgspec

from pool.block_table import BlockTable, PrefixHandle
from pool.config import LayerGeometry, PoolConfig
from pool.errors import PoolError
from pool.stats import BookCounters

STATE_VERSION = 2  # 1: one copy per layer (recording formats v1 and v2)


class TableState(msgspec.Struct, frozen=True, array_like=True):
    block_ids: list[int]
    rows: list[int]
    length: int
    logical_start: int


class RowsState(msgspec.Struct, frozen=True):
    """The row space: the block on each minted row (-1 free), its refcount, the free rows (``parked``: those handed
    out last, pool/free_rows.py) and the reserved capacity."""

    row_block: list[int]
    row_refcount: list[int]
    free: list[int]
    capacity: int
    parked: list[int] = []


class BookState(msgspec.Struct, frozen=True):
    """Everything a ``BlockBook`` is (listeners excepted). ``bytes_per_row``: K+V bytes of one row in one layer;
    ``counters``: over all layers (``pool.stats.BookCounters``)."""

    v: int
    config: PoolConfig
    bytes_per_row: int
    geometry: LayerGeometry | None
    rows: RowsState
    seqs: list[tuple[int, TableState]]
    handles: list[tuple[int, TableState]]
    counters: BookCounters
    next_block_id: int
    next_handle_id: int


def _table_state(table: BlockTable) -> TableState:
    return TableState(list(table.block_ids), list(table.rows), table.length, table.logical_start)


def _table(state: TableState) -> BlockTable:
    return BlockTable(list(state.block_ids), list(state.rows), state.length, state.logical_start)


def state_of(book) -> BookState:
    """A copy of ``book``'s state (nothing shared with the live book). Mutates nothing."""
    return BookState(
        v=STATE_VERSION,
        config=PoolConfig(book.num_layers, book.block_size, book.slab_blocks, book.design, book.max_blocks_per_layer,
                          book.shrink_policy, book.open_blocks),
        bytes_per_row=book.bytes_per_row,
        geometry=book.geometry,
        rows=RowsState(list(book.row_block), list(book.row_refcount), book.free.sorted_rows(), book.capacity,
                       book.free.parked_rows()),
        seqs=[(seq_id, _table_state(table)) for seq_id, table in book.seqs.items()],
        handles=[(hid, _table_state(table)) for hid, table in book.handles.items()],
        counters=BookCounters(**book.counters.to_dict()),
        next_block_id=book._next_block_id,
        next_handle_id=book._next_handle_id,
    )


def restore(book_class, state: BookState, max_blocks_per_layer: int | None = None):
    """A new ``book_class`` (no listeners) in ``state``. The budget is not restored unless given: replays
    re-execute ops that already succeeded once. Trusts the state's consistency (``validated`` checks it)."""
    cfg, saved = state.config, state.rows
    book = book_class(cfg.num_layers, cfg.block_size, cfg.design, cfg.slab_blocks, max_blocks_per_layer,
                      state.bytes_per_row, shrink=cfg.shrink, open_blocks=cfg.open_blocks)
    # (a budget is not restored from cfg unless given: see the docstring)
    book.geometry = state.geometry
    book.row_block = list(saved.row_block)
    book.row_refcount = list(saved.row_refcount)
    book.capacity = saved.capacity
    for row in saved.free:
        book.free.push(row)
    for row in saved.parked:
        book.free.park(row)
    book.blocks = {block_id: row for row, block_id in enumerate(book.row_block) if block_id >= 0}
    book.seqs = {seq_id: _table(table) for seq_id, table in state.seqs}
    book.handles = {hid: _table(table) for hid, table in state.handles}
    book.counters = BookCounters(**state.counters.to_dict())
    book._next_block_id = state.next_block_id
    book._next_handle_id = state.next_handle_id
    return book


def validated(book_class, state: BookState):
    """``restore`` plus every invariant (``check_integrity``): PoolError names what a foreign or damaged state
    breaks. Use it once per state read from outside (a recording's keyframe); ``restore`` after that."""
    try:
        book = restore(book_class, state)
    except (ValueError, TypeError, IndexError) as exc:  # e.g. a row freed twice, a row past the arrays
        raise PoolError(f"inconsistent book state: {exc}") from None
    book.check_integrity()
    if (any(seq_id < 0 for seq_id in book.seqs) or book._next_block_id <= max(book.blocks, default=-1)
            or book._next_handle_id <= max(book.handles, default=-1)):
        raise PoolError("inconsistent book state: ids out of range")
    return book


def handle_map(book) -> dict[int, PrefixHandle]:
    """The book's prefix handles as tickets, by id (what ``apply_op`` needs to continue a replay)."""
    return {hid: book.prefix_handle(hid) for hid in book.handles}
