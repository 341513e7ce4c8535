"""Serialising a ``pool.BlockBook`` to plain data and back (mlx-free), so keyframes can restore bookkeeping.

A pool snapshot (docs/contracts.md) is a *view*: it lacks sequence lengths, block ids and handle tables, so the
book cannot be rebuilt from it. Keyframes therefore also carry this state: everything ``BlockBook`` needs to
continue executing ops exactly as the live pool did. It reads the book's attributes (pool/book_rows.py,
pool/bookkeeping.py); the round-trip test in tests/probes pins the coupling.
"""

from __future__ import annotations

from pool import BlockBook, BlockTable
from pool.stats import BookCounters

STATE_VERSION = 1


def _table_state(table: BlockTable) -> list:
    return [list(table.block_ids), list(table.rows), table.length, table.logical_start]


def _table_from(state: list) -> BlockTable:
    block_ids, rows, length, logical_start = state
    return BlockTable(list(block_ids), list(rows), int(length), int(logical_start))


def book_to_state(book: BlockBook) -> dict:
    """Plain-data copy of the book's full state (JSON-safe). Mutates nothing."""
    return {
        "v": STATE_VERSION,
        "config": {"num_layers": book.num_layers, "block_size": book.block_size, "design": book.design,
                   "slab_blocks": book.slab_blocks, "max_blocks_per_layer": book.max_blocks_per_layer,
                   "bytes_per_row": book.bytes_per_row},
        "geometry": book.geometry,
        "layers": [{"row_block": list(rows.row_block), "row_refcount": list(rows.row_refcount),
                    "free": rows.free.sorted_rows(), "capacity": rows.capacity} for rows in book.layers],
        "seqs": [[seq_id, [_table_state(t) for t in tables]] for seq_id, tables in book.seqs.items()],
        "handles": [[hid, [_table_state(t) for t in tables]] for hid, tables in book.handles.items()],
        "loose": sorted(book.loose),
        "counters": book.counters.to_dict(),
        "next_block_id": book._next_block_id,
        "next_handle_id": book._next_handle_id,
    }


def book_from_state(state: dict, max_blocks_per_layer: int | None = None) -> tuple[BlockBook, dict]:
    """A new BlockBook in the given state (no listeners) and its ``{handle id: PrefixHandle}`` map.

    The budget is not restored unless given: replays re-execute ops that already succeeded once."""
    cfg = state["config"]
    book = BlockBook(cfg["num_layers"], cfg["block_size"], cfg["design"], cfg["slab_blocks"],
                     max_blocks_per_layer, cfg["bytes_per_row"])
    book.geometry = dict(state["geometry"]) if state.get("geometry") else None
    for layer, (rows, saved) in enumerate(zip(book.layers, state["layers"])):
        rows.row_block = list(saved["row_block"])
        rows.row_refcount = list(saved["row_refcount"])
        rows.capacity = int(saved["capacity"])
        for row in saved["free"]:
            rows.free.push(row)
        for row, block_id in enumerate(rows.row_block):
            if block_id >= 0:
                book.blocks[block_id] = (layer, row)
    book.seqs = {int(sid): [_table_from(t) for t in tables] for sid, tables in state["seqs"]}
    book.handles = {int(hid): [_table_from(t) for t in tables] for hid, tables in state["handles"]}
    book.loose = set(state["loose"])
    book.counters = BookCounters(**state["counters"])
    book._next_block_id = int(state["next_block_id"])
    book._next_handle_id = int(state["next_handle_id"])
    handles = {hid: book.prefix_handle(hid) for hid in book.handles}
    return book, handles


def empty_book(pool_config: dict) -> tuple[BlockBook, dict]:
    """A fresh book from a recorded pool configuration (meta["pool"]), for replays that start at op 0."""
    book = BlockBook(int(pool_config["num_layers"]), int(pool_config.get("block_size", 32)),
                     pool_config.get("design", "slab"), int(pool_config.get("slab_blocks", 32)), None)
    return book, {}
