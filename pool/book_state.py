"""The bookkeeping's full state as a typed record, and back (plain data, no mlx).

A pool snapshot is a *view*: it lacks block ids, sequence lengths and handle tables, so a book cannot be rebuilt
from one. ``BlockBook.state()`` returns everything a book needs to continue executing ops exactly as before (the
keyframes of a recording carry it); ``BlockBook.from_state(state)`` builds that book again. As in mlx-lm's caches,
the object owns its serialisation: this module is the only place that reads or writes a book's private fields
for it.

The record's shape is the one recordings have always stored (format v1 keyframes decode into it unchanged):
tables are ``[block_ids, rows, length, logical_start]`` arrays, sequences and handles ``[id, [table per layer]]``.
"""

from __future__ import annotations

import msgspec

from pool.block_table import BlockTable, PrefixHandle
from pool.config import LayerGeometry, PoolGeometry
from pool.errors import PoolError
from pool.stats import BookCounters

STATE_VERSION = 1


class TableState(msgspec.Struct, frozen=True, array_like=True):
    block_ids: list[int]
    rows: list[int]
    length: int
    logical_start: int


class LayerRowsState(msgspec.Struct, frozen=True):
    row_block: list[int]
    row_refcount: list[int]
    free: list[int]
    capacity: int
    parked: list[int] = []  # free rows handed out last (pool/free_rows.py; open_blocks="high"); older states: none


class BookConfig(PoolGeometry, frozen=True):
    bytes_per_row: int = 0


class BookState(msgspec.Struct, frozen=True):
    """Everything a ``BlockBook`` is (listeners excepted)."""

    v: int
    config: BookConfig
    geometry: LayerGeometry | None
    layers: list[LayerRowsState]
    seqs: list[tuple[int, list[TableState]]]
    handles: list[tuple[int, list[TableState]]]
    loose: list[int]
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
        config=BookConfig(book.num_layers, book.block_size, book.slab_blocks, book.design, book.max_blocks_per_layer,
                          book.shrink_policy, open_blocks=book.open_blocks, bytes_per_row=book.bytes_per_row),
        geometry=book.geometry,
        layers=[LayerRowsState(list(rows.row_block), list(rows.row_refcount), rows.free.sorted_rows(), rows.capacity,
                               rows.free.parked_rows())
                for rows in book.layers],
        seqs=[(seq_id, [_table_state(t) for t in tables]) for seq_id, tables in book.seqs.items()],
        handles=[(hid, [_table_state(t) for t in tables]) for hid, tables in book.handles.items()],
        loose=sorted(book.loose),
        counters=BookCounters(**book.counters.to_dict()),
        next_block_id=book._next_block_id,
        next_handle_id=book._next_handle_id,
    )


def restore(book_class, state: BookState, max_blocks_per_layer: int | None = None):
    """A new ``book_class`` (no listeners) in ``state``. The budget is not restored unless given: replays
    re-execute ops that already succeeded once. Trusts the state's consistency (``validated`` checks it)."""
    cfg = state.config
    if len(state.layers) != cfg.num_layers:
        raise PoolError(f"book state lists {len(state.layers)} layers for num_layers={cfg.num_layers}")
    book = book_class(cfg.num_layers, cfg.block_size, cfg.design, cfg.slab_blocks, max_blocks_per_layer,
                      cfg.bytes_per_row, shrink=cfg.shrink, open_blocks=cfg.open_blocks)
    book.geometry = state.geometry
    for layer, (rows, saved) in enumerate(zip(book.layers, state.layers)):
        rows.row_block = list(saved.row_block)
        rows.row_refcount = list(saved.row_refcount)
        rows.capacity = saved.capacity
        for row in saved.free:
            rows.free.push(row)
        for row in saved.parked:
            rows.free.park(row)
        for row, block_id in enumerate(rows.row_block):
            if block_id >= 0:
                book.blocks[block_id] = (layer, row)
    book.seqs = {seq_id: [_table(t) for t in tables] for seq_id, tables in state.seqs}
    book.handles = {hid: [_table(t) for t in tables] for hid, tables in state.handles}
    book.loose = set(state.loose)
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
