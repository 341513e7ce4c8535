"""Book states inside keyframes (v1 wire shape: plain JSON data) <-> ``pool.BlockBook`` (mlx-free).

The book owns its serialisation (``BlockBook.state`` / ``BlockBook.from_state``); this module only moves that typed
record in and out of the recording's payloads.
"""

from __future__ import annotations

import msgspec

from pool import BlockBook
from probes.v1 import book_state_from_v1


def book_to_state(book: BlockBook) -> dict:
    """Plain-data copy of the book's full state (JSON-safe). Mutates nothing."""
    return msgspec.to_builtins(book.state())


def book_from_state(state: dict, max_blocks_per_layer: int | None = None) -> tuple[BlockBook, dict]:
    """A new BlockBook in the given state (no listeners) and its ``{handle id: PrefixHandle}`` map."""
    book = BlockBook.from_state(book_state_from_v1(state), max_blocks_per_layer)
    return book, book.handle_map()
