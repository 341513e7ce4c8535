"""Splitting a block table's rows into maximal same-slab runs (plain Python, shared by storage and snapshots)."""

from __future__ import annotations

from typing import Callable, Sequence


def split_runs(rows: list[int], locate: Callable[[int], tuple[int, int]]) -> list[tuple[int, list[int]]]:
    """Group ``rows`` (logical order) into maximal runs of consecutive entries that live in the same slab.

    ``locate(row) -> (slab, row_in_slab)`` is the storage's row mapping. Returns ``[(slab, [row_in_slab, ...])]``
    in logical order; one gather (take or slice) per run, concatenated in order, rebuilds the table's contents.
    """
    runs: list[tuple[int, list[int]]] = []
    current_slab = None
    for row in rows:
        slab, local = locate(row)
        if slab != current_slab:
            runs.append((slab, [local]))
            current_slab = slab
        else:
            runs[-1][1].append(local)
    return runs


VECTOR_ROWS = 64  # from this many rows, count_runs compares slabs in numpy (a decode step counts every table)


def count_runs(rows: Sequence[int], slab_blocks: int) -> int:
    """Number of same-slab runs for the slab design's mapping (row // slab_blocks), without building them. Long
    tables are counted in numpy: a decode step counts every sequence's visible rows (its ``gather`` event), and a
    Python loop over 16 x 400 rows cost ~0.5 ms per step (``slabscope bench bookkeeping``)."""
    if len(rows) >= VECTOR_ROWS:
        import numpy as np

        slabs = np.fromiter(rows, dtype=np.int64, count=len(rows)) // slab_blocks
        return 1 + int(np.count_nonzero(slabs[1:] != slabs[:-1]))
    runs = 0
    current = -1
    for row in rows:
        slab = row // slab_blocks
        if slab != current:
            runs += 1
            current = slab
    return runs


def visible_rows(rows: Sequence[int], logical_start: int, length: int, block_size: int) -> Sequence[int]:
    """The rows of a block table a gather reads: the blocks covering tokens ``[logical_start, length)`` (a slice of
    ``rows``, list or tuple)."""
    return rows[logical_start // block_size:-(-length // block_size)]


def table_runs(rows: Sequence[int], design: str, slab_blocks: int) -> int:
    """Same-slab runs a gather (or the fused kernel) walks over ``rows``: the slab design's mapping, or one run of
    the single monolithic tensor (0 for no rows)."""
    if not rows:
        return 0
    return count_runs(rows, slab_blocks) if design == "slab" else 1


def mean_runs(hist: dict[int, int]) -> float | None:
    """Mean same-slab runs per gather of a runs -> gathers histogram (None when it counts no gather)."""
    gathers = sum(hist.values())
    return sum(runs * count for runs, count in hist.items()) / gathers if gathers else None


def contiguous_range(local_rows: list[int]) -> tuple[int, int] | None:
    """(first, stop) when ``local_rows`` are consecutive ascending (a slice reads them), else None (take)."""
    first = local_rows[0]
    if local_rows[-1] - first + 1 == len(local_rows) and local_rows == list(range(first, first + len(local_rows))):
        return first, first + len(local_rows)
    return None
