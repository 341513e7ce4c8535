"""The bookkeeping half of a shrink (plain Python, no mlx): which blocks move where and how much capacity goes.

``plan_shrink(book, policy)`` decides without changing anything (``ShrinkPlan``); ``apply_shrink(book, plan)``
then moves the blocks in the book (row ownership, refcounts, free rows, every sequence/handle table referencing
them, block locations) and drops the released rows and capacity. Storage executes the same plan afterwards
(``pool/shrink_exec.py``). The policy is described in ``pool/shrink_types.py``.

Per layer, top down, over the layer's chunks (slabs; monolithic: 32-block grow chunks):

1. a chunk whose minted rows are all free is released (its rows are dropped: capacity stays "minted rows rounded
   up to whole chunks", so the free rows below it stay the ones reused next, lowest first);
2. ``compact`` only: a chunk still holding live rows, no more than ``max_fill`` of it, all fitting into free rows
   below it, has them moved into the lowest free rows (a moved block keeps its id and refcount), then is released.
   Parked rows (pool/free_rows.py, ``open_blocks="high"``) are free rows here like any other: the plan picks them
   and the execution takes exactly the rows it picked;
3. anything else stops the walk: a release never leaves a hole in the chunk list.

Budget: ``policy.budget_bytes`` over all layers, split evenly (layers move in lockstep), counting each row move as
``bytes_per_row`` (K+V) and, in the monolithic design, a release as the copy of every kept row (its one tensor is
reallocated smaller). The slab design may stop inside a chunk's evacuation when the budget runs out (the next
shrink point continues); the monolithic design only releases whole (moves + copy within the budget) or declines,
saying why. Before ``storage_init`` fixed the row size (``bytes_per_row == 0``) nothing moves.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from pool.config import chunk_rows
from pool.errors import PoolError
from pool.shrink_types import ShrinkPolicy


@dataclass
class ShrinkPlan:
    """Per layer: ``moves[layer]`` (source row, destination row) pairs in execution order, and
    ``capacity[layer]`` the capacity (rows) after the shrink; ``old_capacity`` before it. ``declined``: why a
    release the budget could have made was not made ("" if none)."""

    moves: list[list[tuple[int, int]]]
    capacity: list[int]
    old_capacity: list[int]
    declined: str = ""
    copied_rows: list[int] = field(default_factory=list)  # monolithic: rows each layer's shrink copies (kept rows)

    @property
    def empty(self) -> bool:
        return not any(self.moves) and self.capacity == self.old_capacity

    def released_layers(self) -> list[tuple[int, int, int]]:
        """(layer, old rows, new rows) for every layer that gives capacity back."""
        return [(layer, old, new) for layer, (old, new) in enumerate(zip(self.old_capacity, self.capacity))
                if new < old]


def plan_shrink(book, policy: ShrinkPolicy) -> ShrinkPlan:
    """What ``policy`` does to ``book`` now. Reads only, but for a memo (``book.shrink_idle``) of the layers found
    to have nothing to do, keyed by everything the plan reads, so a shrink point where nothing changed costs a
    dict lookup per layer (it runs after every workload step)."""
    old = [rows.capacity for rows in book.layers]
    plan = ShrinkPlan([[] for _ in book.layers], list(old), old, copied_rows=[0] * book.num_layers)
    if not policy.active:
        return plan
    share = policy.budget_bytes // book.num_layers  # bytes each layer may move
    idle = book.shrink_idle
    for layer in range(book.num_layers):
        key = (book.versions[layer], old[layer], book.bytes_per_row)
        memo = idle.get(layer)
        if memo is not None and memo[0] == key:
            plan.declined = plan.declined or memo[1]
            continue
        moves, capacity, declined = _plan_layer(book, layer, policy, share)
        plan.moves[layer], plan.capacity[layer] = moves, capacity
        if book.design != "slab" and capacity < old[layer]:
            plan.copied_rows[layer] = _kept_rows(book, layer, capacity)
        plan.declined = plan.declined or declined
        if not moves and capacity == old[layer]:
            idle[layer] = (key, declined)
    return plan


def _kept_rows(book, layer: int, capacity: int) -> int:
    """Rows a monolithic release to ``capacity`` copies into the smaller tensor (minted rows below it)."""
    return min(capacity, len(book.layers[layer].row_block))


def _plan_layer(book, layer: int, policy: ShrinkPolicy, share: int) -> tuple[list[tuple[int, int]], int, str]:
    """(moves, capacity after, why the budget held a release back) for one layer. Walks the chunks top down,
    keeping every state reached (moves so far, capacity after releasing the chunks above), then takes the deepest
    state the budget affords (``_afforded``)."""
    rows = book.layers[layer]
    chunk = chunk_rows(book.design, book.slab_blocks)
    minted = len(rows.row_block)
    if len(rows.free) < minted - (rows.capacity - chunk):
        # releasing the highest chunk needs its minted rows free, or moved into free rows below: either way at
        # least that many free rows (an O(1) answer for the common case)
        return [], rows.capacity, ""
    free_sorted: list[int] | None = None     # the free rows ascending, sorted only if a move is planned
    used = 0                                 # destinations taken from free_sorted (lowest first)
    moved_in: set[int] = set()               # rows that receive a block in this plan
    moves: list[tuple[int, int]] = []
    states = [(0, rows.capacity)]            # (moves so far, capacity) after each chunk released
    top = rows.capacity // chunk
    while top > 0:
        lo = (top - 1) * chunk
        live = [r for r in range(lo, min(minted, top * chunk)) if rows.row_block[r] != -1 or r in moved_in]
        if live:
            if policy.mode != "compact" or not book.bytes_per_row or len(live) > policy.max_fill * chunk:
                break
            if free_sorted is None:
                free_sorted = rows.free.sorted_rows()
            below = bisect.bisect_left(free_sorted, lo, used) - used  # free rows below this chunk, not yet taken
            if len(live) > below or moved_in.intersection(live):
                break
            evacuation = list(zip(live, free_sorted[used:used + len(live)]))
            moves += evacuation
            moved_in.update(dst for _, dst in evacuation)
            used += len(live)
        top -= 1
        states.append((len(moves), top * chunk))
    return _afforded(book, layer, states, moves, share)


def _afforded(book, layer: int, states: list[tuple[int, int]], moves: list[tuple[int, int]],
              share: int) -> tuple[list, int, str]:
    """The deepest of ``states`` whose bytes fit ``share`` (slab: its moves, plus as many moves of the next
    evacuation as still fit, continued at the next shrink point; monolithic: its moves plus the copy of the kept
    rows, all or nothing)."""
    slab, row_bytes = book.design == "slab", book.bytes_per_row

    def cost(state: tuple[int, int]) -> int:
        count, capacity = state
        copy = 0 if slab or capacity == states[0][1] else _kept_rows(book, layer, capacity)
        return (count + copy) * row_bytes

    best = max(index for index, state in enumerate(states) if cost(state) <= share)  # states[0] costs nothing
    count, capacity = states[best]
    if best == len(states) - 1:
        return moves, capacity, ""
    if slab:  # moves are the only cost: make what progress the rest of the share allows
        count = min(len(moves), share // row_bytes) if row_bytes else count
    what = "moving blocks" if slab else "allocate-smaller-and-copy"
    declined = (f"layer {layer}: {what} to release {capacity - states[-1][1]} more rows needs "
                f"{cost(states[-1]):,} B, over the budget of {share:,} B per layer")
    return moves[:count], capacity, declined


def apply_shrink(book, plan: ShrinkPlan) -> None:
    """Execute ``plan`` on the bookkeeping: moves (rows, refcounts, tables, locations), then releases (rows,
    free lists, capacity, byte counters, counters). Mutates ``book``; emits nothing (the caller does)."""
    for layer, moves in enumerate(plan.moves):
        if moves:
            _move_rows(book, layer, moves)
    chunk = chunk_rows(book.design, book.slab_blocks)
    for layer, old, new in plan.released_layers():
        _release_rows(book, layer, old, new, chunk)
        book.counters.bytes_moved += plan.copied_rows[layer] * book.bytes_per_row


def _move_rows(book, layer: int, moves: list[tuple[int, int]]) -> None:
    rows = book.layers[layer]
    sources = {src for src, _ in moves}
    refs: dict[int, list[tuple[list[int], int]]] = {}  # source row -> (table rows list, index) referencing it
    for owner in (*book.seqs.values(), *book.handles.values()):
        table_rows = owner[layer].rows
        for index, row in enumerate(table_rows):
            if row in sources:
                refs.setdefault(row, []).append((table_rows, index))
    for src, dst in moves:  # each destination as planned: the lowest free rows, parked ones included (plan_shrink)
        if dst not in rows.free or rows.row_block[src] == -1:
            raise PoolError(f"shrink plan out of date: layer {layer} move {src} -> {dst} (the source is free or "
                            "the destination taken)")
        rows.free.take(dst)
        block = rows.row_block[src]
        rows.row_block[dst], rows.row_refcount[dst] = block, rows.row_refcount[src]
        rows.row_block[src], rows.row_refcount[src] = -1, 0
        rows.free.push(src)
        book.blocks[block] = (layer, dst)
        for table_rows, index in refs.get(src, ()):
            table_rows[index] = dst
    book.counters.blocks_moved += len(moves)
    book.counters.bytes_moved += len(moves) * book.bytes_per_row
    book.versions[layer] += 1


def _release_rows(book, layer: int, old: int, new: int, chunk: int) -> None:
    rows = book.layers[layer]
    dropped = max(0, len(rows.row_block) - new)
    if any(block != -1 for block in rows.row_block[new:]):
        raise PoolError(f"shrink plan out of date: layer {layer} releases rows from {new} that hold live blocks")
    del rows.row_block[new:], rows.row_refcount[new:]
    rows.free.drop_from(new)
    rows.capacity = new
    book.counters.rows_released += dropped
    book.counters.slab_releases += (old - new) // chunk
    book.counters.bytes_released += (old - new) * book.bytes_per_row
    if book.row_bytes[layer]:
        book.bytes_now.reserved -= (old - new) * book.row_bytes[layer]
        book.bytes_now.slabs -= (old - new) // chunk
    book.versions[layer] += 1
