"""Every invariant of a :class:`pool.bookkeeping.BlockBook`, checked from scratch (plain Python, no mlx).

Used by tests after every step and by :meth:`pool.PagedKVPool.check_integrity`. Each check raises PoolError with
the name of the broken invariant and the first offending item.
"""

from __future__ import annotations

from collections import Counter

from pool.config import blocks_for_tokens, capacity_for, chunk_rows
from pool.errors import PoolError


def _fail(invariant: str, detail: str) -> None:
    raise PoolError(f"integrity: {invariant}: {detail}")


def check_book(book) -> None:
    """Check tables, refcounts, row ownership, free lists, capacity, budget and counters. Shrink keeps them all
    (a moved block's tables, location and refcount follow it; a release drops only free rows, keeping capacity the
    minted rows rounded up to whole chunks) and adds the release accounting and the policy's own postcondition
    (``_check_shrunk``)."""
    refs = _count_references(book)
    _check_blocks(book, refs)
    for layer in range(book.num_layers):
        _check_layer_rows(book, layer)
    _check_counters(book)
    _check_shrunk(book)


def _check_shrunk(book) -> None:
    """Right after a shrink point under ``release`` or ``compact`` (``book.shrunk``: set by the shrink, cleared when a
    row is freed or a reservation grows the capacity; a monolithic release the budget declined does not set it), no
    layer's highest chunk is entirely free: the policy released every free chunk it could reach."""
    if not book.shrunk or not book.shrink_policy.active:
        return
    chunk = chunk_rows(book.design, book.slab_blocks)
    for layer, rows in enumerate(book.layers):
        top = rows.capacity - chunk
        if rows.capacity and all(block == -1 for block in rows.row_block[top:rows.capacity]):
            _fail("a shrink point leaves no entirely free highest chunk", f"layer {layer}: rows [{top}, "
                  f"{rows.capacity}) are all free after a {book.shrink_policy.mode} shrink")


def _count_references(book) -> Counter:
    """References per block id from sequence tables, handle tables and the caller (loose)."""
    refs: Counter = Counter()
    owners = [("sequence", sid, tables) for sid, tables in book.seqs.items()]
    owners += [("handle", hid, tables) for hid, tables in book.handles.items()]
    for kind, owner_id, tables in owners:
        _check_tables(book, kind, owner_id, tables)
        for layer, table in enumerate(tables):
            for block_id, row in zip(table.block_ids, table.rows):
                location = book.blocks.get(block_id)
                if location != (layer, row):
                    _fail("table rows match block rows", f"{kind} {owner_id} layer {layer} block {block_id} "
                          f"row {row} but the block is at {location}")
                refs[block_id] += 1
    for block_id in book.loose:
        refs[block_id] += 1
    return refs


def _check_tables(book, kind: str, owner_id: int, tables: list) -> None:
    if len(tables) != book.num_layers:
        _fail("one table per layer", f"{kind} {owner_id} has {len(tables)} tables")
    length, start = tables[0].length, tables[0].logical_start
    expected = blocks_for_tokens(length, book.block_size)
    for layer, table in enumerate(tables):
        if (table.length, table.logical_start) != (length, start):
            _fail("layers in lockstep", f"{kind} {owner_id} layer {layer} length/logical_start differ")
        if not 0 <= start <= length:
            _fail("0 <= logical_start <= length", f"{kind} {owner_id}: {start}, {length}")
        if len(table.block_ids) != expected or len(table.rows) != expected:
            _fail("table covers exactly its length", f"{kind} {owner_id} layer {layer}: "
                  f"{len(table.block_ids)} blocks for {length} tokens (expected {expected})")
        if len(set(table.block_ids)) != len(table.block_ids):
            _fail("a table lists a block once", f"{kind} {owner_id} layer {layer}")


def _check_blocks(book, refs: Counter) -> None:
    for block_id, (layer, row) in book.blocks.items():
        rows = book.layers[layer]
        if not 0 <= row < len(rows.row_block) or rows.row_block[row] != block_id:
            _fail("every live block holds exactly one row", f"block {block_id} -> layer {layer} row {row}")
        if rows.row_refcount[row] != refs[block_id]:
            _fail("refcount == number of references", f"block {block_id}: refcount {rows.row_refcount[row]}, "
                  f"{refs[block_id]} references")
        if refs[block_id] == 0:
            _fail("no live block without references", f"block {block_id}")
    stale = [b for b in refs if b not in book.blocks]
    if stale:
        _fail("references point at live blocks", f"freed blocks still referenced: {stale[:5]}")
    loose_dead = [b for b in book.loose if b not in book.blocks]
    if loose_dead:
        _fail("caller-held blocks are live", f"{loose_dead[:5]}")


def _check_layer_rows(book, layer: int) -> None:
    rows = book.layers[layer]
    if len(rows.row_refcount) != len(rows.row_block):
        _fail("row arrays aligned", f"layer {layer}")
    owned = [b for b in rows.row_block if b != -1]
    if len(set(owned)) != len(owned):
        _fail("no block owns two rows", f"layer {layer}")
    if any(book.blocks.get(b, (None, None))[0] != layer for b in owned):
        _fail("rows hold live blocks of their layer", f"layer {layer}")
    free_expected = {r for r, b in enumerate(rows.row_block) if b == -1}
    if not rows.free.heap_consistent() or set(rows.free.sorted_rows()) != free_expected:
        _fail("free rows == rows without a block (disjoint from used rows)", f"layer {layer}")
    if any(rows.row_refcount[r] != 0 for r in free_expected):
        _fail("free rows have refcount 0", f"layer {layer}")
    minted = capacity_for(book.design, book.slab_blocks, len(rows.row_block))
    if rows.capacity < minted or rows.capacity != capacity_for(book.design, book.slab_blocks, rows.capacity):
        _fail("capacity is whole slabs/chunks holding the minted rows (more only by a reservation)",
              f"layer {layer}: capacity {rows.capacity}, {len(rows.row_block)} rows minted")
    budget = book.max_blocks_per_layer
    if budget is not None and rows.num_live > budget:
        _fail("live blocks within budget", f"layer {layer}: {rows.num_live} > {budget}")


def _check_counters(book) -> None:
    counters = book.counters
    minted = sum(len(rows.row_block) for rows in book.layers)
    if counters.rows_minted - counters.rows_released != minted:
        _fail("rows_minted - rows_released == rows minted now",
              f"{counters.rows_minted} - {counters.rows_released} != {minted}")
    if book.design == "slab":
        slabs = sum(rows.capacity for rows in book.layers) // book.slab_blocks
        if counters.slab_appends - counters.slab_releases != slabs:
            _fail("slabs appended - slabs released == slabs reserved",
                  f"{counters.slab_appends} - {counters.slab_releases} != {slabs}")
    created = book.counters.blocks_created
    live = len(book.blocks)
    if created - book.counters.rows_freed != live:
        _fail("blocks created - rows freed == live blocks", f"{created} - {book.counters.rows_freed} != {live}")
    counters = book.counters
    if counters.rows_minted - counters.rows_minted_free + counters.rows_reused != created:
        _fail("every block got a minted or reused row (rows minted free count when taken)", f"{counters}")
    if sum(rows.num_live for rows in book.layers) != live:
        _fail("live rows == live blocks", f"{live}")
