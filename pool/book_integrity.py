"""Every invariant of a :class:`pool.bookkeeping.BlockBook`, checked from scratch (plain Python, no mlx).

Used by tests after every step and by :meth:`pool.PagedKVPool.check_integrity`. Each check raises PoolError with
the name of the broken invariant and the first offending item.
"""

from __future__ import annotations

from collections import Counter

from pool.config import blocks_for_tokens, capacity_for, chunk_rows
from pool.errors import PoolError

# counters that count one row (slab, byte) event once per layer (pool/book_rows.py): multiples of num_layers
PER_LAYER_COUNTERS = ("rows_minted", "rows_reused", "rows_freed", "cow_copies", "blocks_created", "slab_appends",
                      "grow_events", "bytes_copied", "slab_releases", "rows_released", "bytes_released",
                      "blocks_moved", "bytes_moved", "rows_minted_free")


def _fail(invariant: str, detail: str) -> None:
    raise PoolError(f"integrity: {invariant}: {detail}")


def check_book(book) -> None:
    """Check tables, refcounts, row ownership, free rows, capacity, budget and counters. Shrink keeps them all
    (a moved block's tables, location and refcount follow it; a release drops only free rows, keeping capacity the
    minted rows rounded up to whole chunks) and adds the release accounting and the policy's own postcondition
    (``_check_shrunk``)."""
    refs = _count_references(book)
    _check_blocks(book, refs)
    _check_rows(book)
    _check_counters(book)
    _check_shrunk(book)


def _check_shrunk(book) -> None:
    """Right after a shrink point under ``release`` or ``compact`` (``book.shrunk``: set by the shrink, cleared when a
    row is freed or a reservation grows the capacity; a monolithic release the budget declined does not set it), the
    highest chunk is not entirely free: the policy released every free chunk it could reach."""
    if not book.shrunk or not book.shrink_policy.active:
        return
    chunk = chunk_rows(book.design, book.slab_blocks)
    top = book.capacity - chunk
    if book.capacity and all(block == -1 for block in book.row_block[top:book.capacity]):
        _fail("a shrink point leaves no entirely free highest chunk", f"rows [{top}, {book.capacity}) are all "
              f"free after a {book.shrink_policy.mode} shrink")


def _count_references(book) -> Counter:
    """References per block id from sequence and handle tables, each table checked on the way."""
    refs: Counter = Counter()
    owners = [("sequence", sid, table) for sid, table in book.seqs.items()]
    owners += [("handle", hid, table) for hid, table in book.handles.items()]
    for kind, owner_id, table in owners:
        _check_table(book, kind, owner_id, table)
        for block_id, row in zip(table.block_ids, table.rows):
            location = book.blocks.get(block_id)
            if location != row:
                _fail("table rows match block rows", f"{kind} {owner_id} block {block_id} row {row} but the block "
                      f"is at row {location}")
            refs[block_id] += 1
    return refs


def _check_table(book, kind: str, owner_id: int, table) -> None:
    length, start = table.length, table.logical_start
    if not 0 <= start <= length:
        _fail("0 <= logical_start <= length", f"{kind} {owner_id}: {start}, {length}")
    expected = blocks_for_tokens(length, book.block_size)
    if len(table.block_ids) != expected or len(table.rows) != expected:
        _fail("table covers exactly its length", f"{kind} {owner_id}: {len(table.block_ids)} blocks for {length} "
              f"tokens (expected {expected})")
    if len(set(table.block_ids)) != len(table.block_ids):
        _fail("a table lists a block once", f"{kind} {owner_id}")


def _check_blocks(book, refs: Counter) -> None:
    for block_id, row in book.blocks.items():
        if not 0 <= row < len(book.row_block) or book.row_block[row] != block_id:
            _fail("every live block holds exactly one row", f"block {block_id} -> row {row}")
        if book.row_refcount[row] != refs[block_id]:
            _fail("refcount == number of references", f"block {block_id}: refcount {book.row_refcount[row]}, "
                  f"{refs[block_id]} references")
        if refs[block_id] == 0:
            _fail("no live block without references", f"block {block_id}")
    stale = [b for b in refs if b not in book.blocks]
    if stale:
        _fail("references point at live blocks", f"freed blocks still referenced: {stale[:5]}")


def _check_rows(book) -> None:
    if len(book.row_refcount) != len(book.row_block):
        _fail("row arrays aligned", f"{len(book.row_block)} blocks, {len(book.row_refcount)} refcounts")
    owned = [b for b in book.row_block if b != -1]
    if len(set(owned)) != len(owned) or len(owned) != len(book.blocks):
        _fail("every row's block is live and owns that row alone", f"{len(owned)} owned rows, "
              f"{len(set(owned))} distinct blocks, {len(book.blocks)} live blocks")
    free_expected = {r for r, b in enumerate(book.row_block) if b == -1}
    if not book.free.heap_consistent() or set(book.free.sorted_rows()) != free_expected:
        _fail("free rows == rows without a block (disjoint from used rows)", f"{len(free_expected)} rows without a "
              f"block, {len(book.free)} free")
    if any(book.row_refcount[r] != 0 for r in free_expected):
        _fail("free rows have refcount 0", f"{sorted(r for r in free_expected if book.row_refcount[r])[:5]}")
    minted = capacity_for(book.design, book.slab_blocks, len(book.row_block))
    if book.capacity < minted or book.capacity != capacity_for(book.design, book.slab_blocks, book.capacity):
        _fail("capacity is whole slabs/chunks holding the minted rows (more only by a reservation)",
              f"capacity {book.capacity}, {len(book.row_block)} rows minted")
    budget = book.max_blocks_per_layer
    if budget is not None and book.num_live > budget:
        _fail("live blocks within budget", f"{book.num_live} > {budget}")


def _check_counters(book) -> None:
    counters, layers = book.counters, book.num_layers
    figures = counters.to_dict()
    uneven = [name for name in PER_LAYER_COUNTERS if figures[name] % layers]
    if uneven:
        _fail("row counters count every layer (multiples of num_layers)", f"{uneven[0]} = {figures[uneven[0]]} "
              f"over {layers} layers")
    minted = len(book.row_block) * layers
    if counters.rows_minted - counters.rows_released != minted:
        _fail("rows_minted - rows_released == rows minted now (over layers)",
              f"{counters.rows_minted} - {counters.rows_released} != {minted}")
    if book.design == "slab":
        slabs = book.capacity // book.slab_blocks * layers
        if counters.slab_appends - counters.slab_releases != slabs:
            _fail("slabs appended - slabs released == slabs reserved (over layers)",
                  f"{counters.slab_appends} - {counters.slab_releases} != {slabs}")
    live = len(book.blocks) * layers
    if counters.blocks_created - counters.rows_freed != live:
        _fail("blocks created - rows freed == live blocks (over layers)",
              f"{counters.blocks_created} - {counters.rows_freed} != {live}")
    if counters.rows_minted - counters.rows_minted_free + counters.rows_reused != counters.blocks_created:
        _fail("every block got a minted or reused row (rows minted free count when taken)", f"{counters}")
