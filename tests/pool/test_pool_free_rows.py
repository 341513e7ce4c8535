import pytest

from pool.free_rows import FreeRows, fragmentation_index, free_run_stats


def test_free_rows_pop_lowest_first():
    free = FreeRows()
    for row in (5, 1, 3):
        free.push(row)
    assert [free.pop_lowest(), free.pop_lowest()] == [1, 3] and free.sorted_rows() == [5]


def test_free_run_stats_counts_holes_and_tail():
    assert free_run_stats([], 0, 0) == (0, 0, 0)
    assert free_run_stats([], 4, 8) == (4, 1, 4)             # only the unminted tail
    assert free_run_stats([1, 2, 5], 8, 8) == (3, 2, 2)       # holes {1,2}, {5}
    assert free_run_stats([1, 6, 7], 8, 10) == (5, 2, 4)      # {6,7} joins the tail {8,9}
    assert free_run_stats([0, 2, 4], 6, 6) == (3, 3, 1)
    assert free_run_stats([0, 1], 5, 8) == (5, 2, 3)         # {0,1} does not touch the tail {5,6,7}
    assert free_run_stats([3], 5, 8) == (4, 2, 3)            # a lone freed row before a separate tail
    assert free_run_stats([0, 2], 5, 8) == (5, 3, 3)         # two closed holes, then the tail


def test_a_row_freed_twice_is_refused_and_the_heap_is_checked():
    free = FreeRows()
    free.push(4)
    with pytest.raises(ValueError, match="row 4 is already free"):
        free.push(4)
    assert free.heap_consistent()
    free._heap[0] = 9  # same length, other rows: the integrity check must see it
    assert not free.heap_consistent()


def test_fragmentation_index():
    assert fragmentation_index(0, 0) == 0.0
    assert fragmentation_index(4, 4) == 0.0
    assert fragmentation_index(4, 1) == 0.75


def test_count_runs_agrees_with_the_run_split_the_gathers_read():
    from pool.gather_runs import count_runs, split_runs

    cases = {(): 0, (0,): 1, (0, 1, 2, 3): 1, (4, 5): 1, (3, 4): 2, (0, 4, 1, 5): 4, (7, 6, 5, 4, 3, 2, 1, 0): 2,
             (0, 1, 4, 5, 2): 3}
    for rows, runs in cases.items():
        assert count_runs(list(rows), 4) == runs == len(split_runs(list(rows), lambda r: divmod(r, 4))), rows


def test_contiguous_range_only_for_consecutive_ascending_rows():
    from pool.gather_runs import contiguous_range

    assert contiguous_range([2, 3, 4]) == (2, 5) and contiguous_range([5]) == (5, 6)
    assert contiguous_range([0, 1]) == (0, 2)
    for rows in ([0, 2, 1, 3], [1, 0], [3, 4, 6], [4, 3, 2]):
        assert contiguous_range(rows) is None, rows
