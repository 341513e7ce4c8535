"""The bookkeeping half of a shrink (plain Python, no mlx): which blocks move where and how much capacity goes.

``plan_shrink(book, policy)`` decides without changing anything (``ShrinkPlan``); ``apply_shrink(book, plan)``
then moves the blocks in the book (row ownership, refcounts, free rows, every sequence/handle table referencing
them, block locations) and drops the released rows and capacity. Storage executes the same plan afterwards, in
every layer (``pool/shrink_exec.py``): one row space, one plan. The policy is described in
``pool/shrink_types.py``.

Top down, over the pool's chunks (slabs; monolithic: 32-block grow chunks):

1. a chunk whose minted rows are all free is released (its rows are dropped: capacity stays "minted rows rounded
   up to whole chunks", so the free rows below it stay the ones reused next, lowest first);
2. ``compact`` only: a chunk still holding live rows, no more than ``max_fill`` of it, all fitting into free rows
   below it, has them moved into the lowest free rows (a moved block keeps its id and refcount), then is released.
   Parked rows (pool/free_rows.py, ``open_blocks="high"``) are free rows here like any other: the plan picks them
   and the execution takes exactly the rows it picked;
3. anything else stops the walk: a release never leaves a hole in the chunk list.

Budget: ``policy.budget_bytes`` over all layers, so ``budget_bytes // num_layers`` per layer, counting each row move
as ``bytes_per_row`` (K+V of one layer) and, in the monolithic design, a release as the copy of every kept row (its
one tensor per layer is reallocated smaller). The slab design may stop inside a chunk's evacuation when the budget
runs out (the next shrink point continues); the monolithic design only releases whole (moves + copy within the
budget) or declines, saying why. Before ``storage_init`` fixed the row size (``bytes_per_row == 0``) nothing moves.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from pool.config import chunk_rows
from pool.errors import PoolError
from pool.shrink_types import ShrinkPolicy


@dataclass
class ShrinkPlan:
    """``moves``: (source row, destination row) pairs in execution order; ``capacity``: the capacity (rows) after
    the shrink, ``old_capacity`` before it; ``declined``: why a release the budget could have made was not made
    ("" if none); ``copied_rows``: the rows a monolithic release copies into the smaller tensor of each layer."""

    moves: list[tuple[int, int]]
    capacity: int
    old_capacity: int
    declined: str = ""
    copied_rows: int = 0

    @property
    def released(self) -> bool:
        return self.capacity < self.old_capacity

    @property
    def empty(self) -> bool:
        return not self.moves and not self.released


def plan_shrink(book, policy: ShrinkPolicy) -> ShrinkPlan:
    """What ``policy`` does to ``book`` now. Reads only. A shrink point where nothing can be released costs an
    O(1) check (``_plan``): it runs after every workload step."""
    plan = ShrinkPlan([], book.capacity, book.capacity)
    if not policy.active:
        return plan
    share = policy.budget_bytes // book.num_layers  # bytes each layer may move
    plan.moves, plan.capacity, plan.declined = _plan(book, policy, share)
    if book.design != "slab" and plan.released:
        plan.copied_rows = _kept_rows(book, plan.capacity)
    return plan


def _kept_rows(book, capacity: int) -> int:
    """Rows a monolithic release to ``capacity`` copies into the smaller tensor (minted rows below it)."""
    return min(capacity, len(book.row_block))


def _plan(book, policy: ShrinkPolicy, share: int) -> tuple[list[tuple[int, int]], int, str]:
    """(moves, capacity after, why the budget held a release back). Walks the chunks top down, keeping every state
    reached (moves so far, capacity after releasing the chunks above), then takes the deepest state the budget
    affords (``_afforded``)."""
    chunk = chunk_rows(book.design, book.slab_blocks)
    minted, row_block = len(book.row_block), book.row_block
    if len(book.free) < minted - (book.capacity - chunk):
        # releasing the highest chunk needs its minted rows free, or moved into free rows below: either way at
        # least that many free rows (an O(1) answer for the common case)
        return [], book.capacity, ""
    free_sorted: list[int] | None = None     # the free rows ascending, sorted only if a move is planned
    used = 0                                 # destinations taken from free_sorted (lowest first)
    moved_in: set[int] = set()               # rows that receive a block in this plan
    moves: list[tuple[int, int]] = []
    states = [(0, book.capacity)]            # (moves so far, capacity) after each chunk released
    top = book.capacity // chunk
    while top > 0:
        lo = (top - 1) * chunk
        live = [r for r in range(lo, min(minted, top * chunk)) if row_block[r] != -1 or r in moved_in]
        if live:
            if policy.mode != "compact" or not book.bytes_per_row or len(live) > policy.max_fill * chunk:
                break
            if free_sorted is None:
                free_sorted = book.free.sorted_rows()
            below = bisect.bisect_left(free_sorted, lo, used) - used  # free rows below this chunk, not yet taken
            if len(live) > below or moved_in.intersection(live):
                break
            evacuation = list(zip(live, free_sorted[used:used + len(live)]))
            moves += evacuation
            moved_in.update(dst for _, dst in evacuation)
            used += len(live)
        top -= 1
        states.append((len(moves), top * chunk))
    return _afforded(book, states, moves, share)


def _afforded(book, states: list[tuple[int, int]], moves: list[tuple[int, int]],
              share: int) -> tuple[list, int, str]:
    """The deepest of ``states`` whose bytes per layer fit ``share`` (slab: its moves, plus as many moves of the
    next evacuation as still fit, continued at the next shrink point; monolithic: its moves plus the copy of the
    kept rows, all or nothing)."""
    slab, row_bytes = book.design == "slab", book.bytes_per_row

    def cost(state: tuple[int, int]) -> int:
        count, capacity = state
        copy = 0 if slab or capacity == states[0][1] else _kept_rows(book, capacity)
        return (count + copy) * row_bytes

    best = max(index for index, state in enumerate(states) if cost(state) <= share)  # states[0] costs nothing
    count, capacity = states[best]
    if best == len(states) - 1:
        return moves, capacity, ""
    if slab:  # moves are the only cost: make what progress the rest of the share allows
        count = min(len(moves), share // row_bytes) if row_bytes else count
    what = "moving blocks" if slab else "allocate-smaller-and-copy"
    declined = (f"{what} to release {capacity - states[-1][1]} more rows needs {cost(states[-1]):,} B per layer, "
                f"over the budget of {share:,} B per layer")
    return moves[:count], capacity, declined


def apply_shrink(book, plan: ShrinkPlan) -> None:
    """Execute ``plan`` on the bookkeeping: moves (rows, refcounts, tables, locations), then the release (rows,
    free rows, capacity, counters). Mutates ``book``; emits nothing (the caller does)."""
    if plan.moves:
        _move_rows(book, plan.moves)
    if plan.released:
        _release_rows(book, plan.old_capacity, plan.capacity)
        book.counters.bytes_moved += plan.copied_rows * book.num_layers * book.bytes_per_row


def _move_rows(book, moves: list[tuple[int, int]]) -> None:
    sources = {src for src, _ in moves}
    refs: dict[int, list[tuple[list[int], int]]] = {}  # source row -> (table rows list, index) referencing it
    for table in (*book.seqs.values(), *book.handles.values()):
        for index, row in enumerate(table.rows):
            if row in sources:
                refs.setdefault(row, []).append((table.rows, index))
    row_block, refcount = book.row_block, book.row_refcount
    for src, dst in moves:
        if dst not in book.free or row_block[src] == -1:
            raise PoolError(f"shrink plan out of date: move {src} -> {dst} (row {dst} is not free or row {src} is)")
        book.free.take(dst)  # the lowest free row the plan saw, parked or not (pop_lowest would skip a parked one)
        block = row_block[src]
        row_block[dst], refcount[dst] = block, refcount[src]
        row_block[src], refcount[src] = -1, 0
        book.free.push(src)
        book.blocks[block] = dst
        for table_rows, index in refs.get(src, ()):
            table_rows[index] = dst
    moved = len(moves) * book.num_layers
    book.counters.blocks_moved += moved
    book.counters.bytes_moved += moved * book.bytes_per_row
    book.version += 1


def _release_rows(book, old: int, new: int) -> None:
    chunk, layers = chunk_rows(book.design, book.slab_blocks), book.num_layers
    dropped = max(0, len(book.row_block) - new)
    if any(block != -1 for block in book.row_block[new:]):
        raise PoolError(f"shrink plan out of date: it releases rows from {new} that hold live blocks")
    del book.row_block[new:], book.row_refcount[new:]
    book.free.drop_from(new)
    book.capacity = new
    book.counters.rows_released += dropped * layers
    book.counters.slab_releases += (old - new) // chunk * layers
    book.counters.bytes_released += (old - new) * layers * book.bytes_per_row
    book.version += 1
