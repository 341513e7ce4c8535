"""Free physical rows of the pool (one row space: every layer's): a min-heap for lowest-row-first reuse plus a set
for membership, and (built on first use) a max-heap for the highest free row, which an ``open_blocks="high"`` pool
gives its open blocks.

Reusing the lowest free row first makes reuse deterministic (tests can assert exact rows) and keeps live rows packed
toward the front, so fragmentation that remains is real and visible in snapshots.

A free row can be *parked*: still free (counted, reusable, shown), but handed out only when no unparked row is left.
An ``open_blocks="high"`` pool parks the row an open block would have taken had it gone to the lowest free row, so
the full blocks after it land where they would have without the policy (a sequence's rows stay aligned to slabs as
they were: a shifted layout split every later prompt's gathers and writes across one more slab).

The heaps delete lazily: a row taken (or parked) through one path stays in the other heaps until a pop meets it
there and drops it for not being a free unparked (parked) row any more. Every free row is in each built heap of
its kind at least once, so a pop returns the lowest (highest) row of its kind; the sets are the truth the integrity
check compares.
"""

from __future__ import annotations

import heapq


class FreeRows:
    """Owns the free rows of the pool's row space. Mutated only by :meth:`push`, :meth:`push_range`, :meth:`park`,
    :meth:`pop_lowest`, :meth:`pop_highest`, :meth:`take` and :meth:`drop_from`."""

    __slots__ = ("_heap", "_high", "_members", "_parked", "_parked_heap")

    def __init__(self) -> None:
        self._heap: list[int] = []  # unparked rows (lazy)
        self._high: list[int] | None = None  # unparked rows negated (lazy); None until pop_highest is first called
        self._members: set[int] = set()  # every free row, parked or not
        self._parked: set[int] = set()  # the parked ones
        self._parked_heap: list[int] = []  # parked rows (lazy)

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, row: int) -> bool:
        return row in self._members

    @property
    def unparked(self) -> int:
        """How many free rows are not parked."""
        return len(self._members) - len(self._parked)

    def push(self, row: int) -> None:
        """Mark ``row`` free (unparked). A row freed twice is a bookkeeping bug, so it raises."""
        if row in self._members:
            raise ValueError(f"row {row} is already free")
        self._members.add(row)
        heapq.heappush(self._heap, row)
        if self._high is not None:
            heapq.heappush(self._high, -row)

    def push_range(self, first: int, stop: int) -> None:
        """Mark rows ``[first, stop)`` free (unparked) at once: rows just minted, so none is free yet (ValueError
        otherwise). One heapify instead of a push per row: an open block minted past a burst's gap of a thousand rows
        in every layer, which row by row cost the prefill 14 ms of host time."""
        rows = range(first, stop)
        if not rows:
            return
        if not self._members.isdisjoint(rows):
            raise ValueError(f"rows [{first}, {stop}) are already partly free")
        self._members.update(rows)
        self._heap.extend(rows)
        heapq.heapify(self._heap)
        if self._high is not None:
            self._high.extend(-row for row in rows)
            heapq.heapify(self._high)

    def park(self, row: int) -> None:
        """Hand the free, unparked ``row`` out last (ValueError otherwise: a bookkeeping bug)."""
        if row not in self._members or row in self._parked:
            raise ValueError(f"row {row} is not a free unparked row")
        self._parked.add(row)
        heapq.heappush(self._parked_heap, row)

    def lowest_unparked(self) -> int | None:
        """The lowest free unparked row, left free (None when there is none)."""
        if not self.unparked:
            return None
        heap = self._heap
        while heap[0] not in self._members or heap[0] in self._parked:
            heapq.heappop(heap)
        return heap[0]

    def pop_lowest(self) -> int:
        """Take the lowest unparked free row, else the lowest parked one (IndexError when none is free). The hot
        path of every full block: kept to a few set and heap operations."""
        members, parked = self._members, self._parked
        if len(members) > len(parked):
            heap = self._heap
            row = heapq.heappop(heap)
            while row not in members or row in parked:
                row = heapq.heappop(heap)
            members.discard(row)
            if self._high is not None and len(self._high) > 2 * len(members) + 64:
                self._rebuild()
            return row
        if not members:
            raise IndexError("no free row")
        row = heapq.heappop(self._parked_heap)
        while row not in parked:
            row = heapq.heappop(self._parked_heap)
        self._take(row)
        return row

    def pop_highest(self) -> int:
        """Take the highest unparked free row, else the highest parked one (IndexError when none is free)."""
        if not self._members:
            raise IndexError("no free row")
        if not self.unparked:
            row = max(self._parked)  # only parked rows left: rare, and no heap kept for it
        else:
            if self._high is None:
                self._high = [-row for row in self._members if row not in self._parked]
                heapq.heapify(self._high)
            row = -heapq.heappop(self._high)
            while row not in self._members or row in self._parked:
                row = -heapq.heappop(self._high)
        self._take(row)
        return row

    def take(self, row: int) -> None:
        """Take the free ``row``, parked or not (a shrink's move names its destination; ValueError when it is not
        free: a bookkeeping bug)."""
        if row not in self._members:
            raise ValueError(f"row {row} is not free")
        self._take(row)

    def _take(self, row: int) -> None:
        """Drop ``row`` from the free (and parked) rows; rebuild the heaps when stale entries outnumber the rows
        (keeps each heap within twice the free rows, so pops stay logarithmic in them)."""
        self._members.discard(row)
        self._parked.discard(row)
        limit = 2 * len(self._members) + 64
        if max(len(self._heap), len(self._parked_heap), len(self._high or ())) > limit:
            self._rebuild()

    def _rebuild(self) -> None:
        unparked = self._members - self._parked
        self._heap = sorted(unparked)
        if self._high is not None:
            self._high = sorted(-row for row in unparked)
        self._parked_heap = sorted(self._parked)

    def drop_from(self, first: int) -> int:
        """Forget every free row ``>= first`` (a shrink released the capacity holding them). Returns how many."""
        dropped = [row for row in self._members if row >= first]
        if dropped:
            self._members.difference_update(dropped)
            self._parked.difference_update(dropped)
            self._rebuild()
        return len(dropped)

    def sorted_rows(self) -> list[int]:
        """Every free row, parked or not, ascending."""
        return sorted(self._members)

    def parked_rows(self) -> list[int]:
        return sorted(self._parked)

    def heap_consistent(self) -> bool:
        """True when the parked rows are free and every free row is in each heap of its kind (an integrity check;
        the heaps may also hold rows taken or parked since, which their pops skip)."""
        unparked = self._members - self._parked
        if not self._parked <= self._members or not unparked.issubset(self._heap):
            return False
        if not self._parked.issubset(self._parked_heap):
            return False
        return self._high is None or unparked.issubset({-row for row in self._high})


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
