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


def test_fragmentation_index():
    assert fragmentation_index(0, 0) == 0.0
    assert fragmentation_index(4, 4) == 0.0
    assert fragmentation_index(4, 1) == 0.75
