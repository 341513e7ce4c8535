"""``PagedKVPool.layers_matching`` (pool/table_match.py): rows compared once per set of row versions, and a row change
in a layer (here: the next block landing on other rows in one layer) is seen at the next call."""

from __future__ import annotations

import pytest

from pool import PagedKVPool, PoolConfig, PoolError

from pool_helpers import make_kv


def _pool(tokens: int = 5) -> PagedKVPool:
    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=2, slab_blocks=4))
    for seq_id in (0, 1):
        pool.add_sequence(seq_id)
        pool.prepare_write(seq_id, 0, tokens)
        for layer in range(2):
            pool.write(layer, seq_id, 0, *make_kv(tokens, seed=seq_id))
    return pool


def test_equal_layers_are_compared_once_until_a_row_changes():
    pool = _pool()
    assert 1 in pool.layers_matching(0, [0, 1]) and pool.table_match.compared == 1
    for _ in range(3):
        assert 1 in pool.layers_matching(0, [0, 1])
    assert pool.table_match.compared == 1  # memo hits: no row changed
    pool.prepare_write(0, 5, 1)  # lengths move without a new block: still no row comparison
    assert 1 in pool.layers_matching(0, [0, 1]) and pool.table_match.compared == 1
    pool.prepare_write(0, 6, 1)  # a new block in every layer: rows changed, compared again (still equal)
    assert 1 in pool.layers_matching(0, [0, 1]) and pool.table_match.compared == 2
    assert 1 in pool.layers_matching(0, [0]) and pool.table_match.compared == 3  # another group of sequences


def test_a_layer_whose_next_block_lands_on_another_row_is_no_longer_equal():
    pool = _pool()
    assert 1 in pool.layers_matching(0, [0, 1])  # memoised equal
    held = pool.restore_block(1, pool.read_block(pool.block_ids(1, 0)[0]))  # layer 1 only takes the next free row
    pool.prepare_write(1, 5, 2)  # sequence 1's next block: row r in layer 0, row r + 1 in layer 1
    assert pool.book.tables(1)[0].rows != pool.book.tables(1)[1].rows
    assert 1 not in pool.layers_matching(0, [0, 1]) and 1 not in pool.layers_matching(0, [1])
    assert 1 in pool.layers_matching(0, [0])  # sequence 0's tables are still equal
    pool.release_block(held)
    pool.check_integrity()


def test_unknown_sequences_and_layers_are_clear_errors():
    pool = _pool()
    with pytest.raises(PoolError, match="unknown sequence"):
        pool.layers_matching(0, [0, 7])
    with pytest.raises(PoolError, match="out of range"):
        pool.layers_matching(2, [0])


def test_layers_matching_is_memoised_by_every_layer_version_and_sees_a_diverging_layer():
    pool = _pool()
    assert pool.layers_matching(0, [0, 1]) == {0, 1} and pool.table_match.compared == 1
    pool.prepare_write(0, 5, 1)  # lengths move, no row changes: the memo answers
    assert pool.layers_matching(0, [0, 1]) == {0, 1} and pool.table_match.compared == 1
    held = pool.restore_block(1, pool.read_block(pool.block_ids(1, 0)[0]))
    pool.prepare_write(1, 5, 2)  # sequence 1's next block lands on another row in layer 1
    assert pool.layers_matching(0, [0, 1]) == {0} and pool.table_match.compared == 2  # versions moved: compared
    assert pool.layers_matching(1, [0]) == {0, 1}
    pool.release_block(held)


def test_lengths_and_starts_are_compared_on_every_call_not_memoised():
    """Lengths and logical starts move without a row version (every decode step): a table whose length differs in
    one layer is not a match, memo or not (white-box: set by hand, as no pool operation moves one layer alone)."""
    pool = _pool()
    assert pool.layers_matching(0, [0, 1]) == {0, 1}
    table = pool.book.tables(1)[1]
    table.length -= 1
    try:
        assert pool.layers_matching(0, [0, 1]) == {0}
    finally:
        table.length += 1
    table.logical_start += 1
    try:
        assert pool.layers_matching(0, [0, 1]) == {0}
    finally:
        table.logical_start -= 1
    assert pool.layers_matching(0, [0, 1]) == {0, 1}


def test_layer_slabs_and_layer_key_are_the_pools_own_lists_and_their_geometry():
    """What a planned launch reads per layer (``layer_slabs``: the storage's own lists, no copy) and what a plan
    is keyed by (``layer_key``: slab count, rows per slab, geometry); both refuse a layer out of range."""
    pool = _pool()
    keys, values = pool.layer_slabs(1)
    assert keys is pool.storage.keys[1] and values is pool.storage.values[1] and len(keys) == 2
    assert pool.layer_key(1) == (2, 4, pool.storage.geometry[1]) and pool.storage.geometry[1] is not None
    empty = PagedKVPool(PoolConfig(num_layers=2, block_size=2, slab_blocks=4))
    assert empty.layer_key(0) == (0, 0, None) and empty.layer_slabs(0) == ([], [])
    for call in (pool.layer_slabs, pool.layer_key):
        with pytest.raises(PoolError, match="out of range"):
            call(2)
