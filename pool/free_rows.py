"""Free physical rows of one layer: a min-heap for lowest-row-first reuse plus a set for membership.

Reusing the lowest free row first makes reuse deterministic (tests can assert exact rows) and keeps live rows packed
toward the front, so fragmentation that remains is real and visible in snapshots.
"""

from __future__ import annotations

import heapq


class FreeRows:
    """Owns the free rows of one layer. Mutated only by :meth:`push` and :meth:`pop_lowest`."""

    __slots__ = ("_heap", "_members")

    def __init__(self) -> None:
        self._heap: list[int] = []
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

    def pop_lowest(self) -> int:
        """Take the lowest free row (IndexError when empty)."""
        row = heapq.heappop(self._heap)
        self._members.discard(row)
        return row

    def drop_from(self, first: int) -> int:
        """Forget every free row ``>= first`` (a shrink released the capacity holding them). Returns how many."""
        dropped = [row for row in self._members if row >= first]
        if dropped:
            self._members.difference_update(dropped)
            self._heap = sorted(self._members)
        return len(dropped)

    def sorted_rows(self) -> list[int]:
        return sorted(self._members)

    def heap_consistent(self) -> bool:
        """True when the heap and the membership set hold the same rows (an integrity check)."""
        return len(self._heap) == len(self._members) and set(self._heap) == self._members


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
