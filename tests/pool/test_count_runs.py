"""``count_runs`` (pool/gather_runs.py): the numpy count of long tables equals the loop's (split_runs') count."""

import random

from pool.gather_runs import VECTOR_ROWS, count_runs, split_runs


def test_long_tables_count_the_same_runs_as_splitting_them():
    rng = random.Random(5)
    for length in (VECTOR_ROWS - 1, VECTOR_ROWS, 65, 300, 1000):
        for slab_blocks in (1, 2, 8, 32):
            rows = [rng.randrange(0, 4 * length) for _ in range(length)]
            rows[10:40] = range(100, 130)  # a long same-slab stretch
            expected = len(split_runs(rows, lambda r: divmod(r, slab_blocks)))
            assert count_runs(rows, slab_blocks) == count_runs(tuple(rows), slab_blocks) == expected
    assert count_runs(list(range(VECTOR_ROWS * 2)), VECTOR_ROWS * 2) == 1
    assert count_runs([], 4) == 0
