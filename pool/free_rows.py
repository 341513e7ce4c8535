"""Free physical rows of one layer: a min-heap for lowest-row-first reuse plus a set for membership, and (built on
first use) a max-heap for the highest free row, which an ``open_blocks="high"`` pool gives its open blocks.

Reusing the lowest free row first makes reuse deterministic (tests can assert exact rows) and keeps live rows packed
toward the front, so fragmentation that remains is real and visible in snapshots.

Both heaps delete lazily: a row taken through one heap stays in the other until a pop meets it there and, finding
it no longer a member, drops it. A member is in every built heap at least once (each push adds it to both), so a
pop returns the lowest (highest) member; the set is the truth the integrity check compares.
"""

from __future__ import annotations

import heapq


class FreeRows:
    """Owns the free rows of one layer. Mutated only by :meth:`push`, :meth:`pop_lowest`, :meth:`pop_highest` and
    :meth:`drop_from`."""

    __slots__ = ("_heap", "_high", "_members")

    def __init__(self) -> None:
        self._heap: list[int] = []
        self._high: list[int] | None = None  # negated rows; None until pop_highest is first called
        self._members: set[int] = set()

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, row: int) -> bool:
        return row in self._members

    def push(self, row: int) -> None:
        """Mark ``row`` free. A row freed twice is a bookkeeping bug, so it raises."""
        if row in self._members:
            raise ValueError(f"row {row} is already free")
        self._members.add(row)
        heapq.heappush(self._heap, row)
        if self._high is not None:
            heapq.heappush(self._high, -row)

    def pop_lowest(self) -> int:
        """Take the lowest free row (IndexError when empty)."""
        if not self._members:
            raise IndexError("no free row")
        row = heapq.heappop(self._heap)
        while row not in self._members:  # taken through the other heap already
            row = heapq.heappop(self._heap)
        self._take(row)
        return row

    def pop_highest(self) -> int:
        """Take the highest free row (IndexError when empty)."""
        if not self._members:
            raise IndexError("no free row")
        if self._high is None:
            self._high = [-row for row in self._members]
            heapq.heapify(self._high)
        row = -heapq.heappop(self._high)
        while row not in self._members:
            row = -heapq.heappop(self._high)
        self._take(row)
        return row

    def _take(self, row: int) -> None:
        """Drop ``row`` from the members; rebuild the heaps when stale entries outnumber the members (keeps each
        heap within twice the free rows, so pops stay logarithmic in them)."""
        self._members.discard(row)
        limit = 2 * len(self._members) + 64
        if len(self._heap) > limit or (self._high is not None and len(self._high) > limit):
            self._rebuild()

    def _rebuild(self) -> None:
        self._heap = sorted(self._members)
        if self._high is not None:
            self._high = sorted(-row for row in self._members)

    def drop_from(self, first: int) -> int:
        """Forget every free row ``>= first`` (a shrink released the capacity holding them). Returns how many."""
        dropped = [row for row in self._members if row >= first]
        if dropped:
            self._members.difference_update(dropped)
            self._rebuild()
        return len(dropped)

    def sorted_rows(self) -> list[int]:
        return sorted(self._members)

    def heap_consistent(self) -> bool:
        """True when every free row is in each heap (an integrity check; the heaps may also hold rows taken
        through the other heap, which their pops skip)."""
        if not self._members.issubset(self._heap):
            return False
        return self._high is None or self._members.issubset({-row for row in self._high})


def free_runs(free_sorted: list[int], tail_start: int, capacity: int) -> list[tuple[int, int]]:
    """Maximal runs of free rows over ``[0, capacity)`` as ``(first row, length)``, ascending.

    ``free_sorted``: freed (reusable) rows below ``tail_start``, ascending; rows ``[tail_start, capacity)`` are
    reserved capacity that was never minted, also free (joined to a freed run that touches them).
    """
    runs: list[tuple[int, int]] = []
    start = previous = -2
    for row in free_sorted:
        if row != previous + 1:
            if start >= 0:
                runs.append((start, previous - start + 1))
            start = row
        previous = row
    tail = capacity - tail_start
    if start >= 0:
        joins = tail > 0 and previous == tail_start - 1  # the last freed run touches the unminted tail: one hole
        runs.append((start, previous - start + 1 + (tail if joins else 0)))
        tail = 0 if joins else tail
    if tail > 0:
        runs.append((tail_start, tail))
    return runs


def free_run_stats(free_sorted: list[int], tail_start: int, capacity: int) -> tuple[int, int, int]:
    """(free rows, holes, largest free run) over rows ``[0, capacity)`` (see ``free_runs``). A hole is a maximal
    run of consecutive free rows."""
    runs = free_runs(free_sorted, tail_start, capacity)
    return sum(length for _, length in runs), len(runs), max((length for _, length in runs), default=0)


def fragmentation_index(free_rows: int, largest_free_run: int) -> float:
    """``1 - largest_free_run / free_rows`` (0.0 with no free rows).

    0 means all free rows form one contiguous run (a new sequence's blocks land in one run of rows, so its gathers
    take few runs); it approaches 1 as free space splits into many small holes (new sequences' rows interleave with
    others', gathers split into more runs, and in the slab design partly-empty slabs cannot be returned).
    """
    if free_rows == 0:
        return 0.0
    return 1.0 - largest_free_run / free_rows
