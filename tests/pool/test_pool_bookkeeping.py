"""White-box tests of the plain-Python bookkeeping on tiny books: exact ids, rows, refcounts, free rows, slabs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pool import BlockBook, BudgetExceeded, PoolError, SequenceOp, apply_op
from pool.ops import CopyOnWrite


def book(num_layers=2, block_size=4, slab_blocks=2, design="slab", budget=None):
    return BlockBook(num_layers, block_size, design, slab_blocks, budget, bytes_per_row=100)


def refcounts(b, layer, seq):
    return [b.refcount(block) for block in b.block_ids(layer, seq)]


def test_block_ids_are_unique_across_layers_and_rows_minted_lazily():
    b = book()
    b.add_sequence(7)
    assert b.layers[0].row_block == [] and b.layers[0].capacity == 0  # no rows before a write
    b.prepare_write(7, 0, 10)  # 3 blocks of 4 tokens
    assert b.block_ids(0, 7) == [0, 1, 2]
    assert b.block_ids(1, 7) == [3, 4, 5]
    assert b.tables(7)[0].rows == [0, 1, 2] and b.tables(7)[1].rows == [0, 1, 2]
    assert b.seq_length(7) == 10
    assert [b.layers[i].capacity for i in range(2)] == [4, 4]  # 2 slabs of 2 rows per layer
    assert b.counters.slab_appends == 4 and b.counters.rows_minted == 6
    b.prepare_write(7, 10, 2)  # fills block 2: no new block
    assert b.block_ids(0, 7) == [0, 1, 2] and b.seq_length(7) == 12
    b.check_integrity()


def test_freed_rows_reused_lowest_first_before_minting():
    b = book(num_layers=1)
    for seq in (1, 2, 3):
        b.add_sequence(seq)
        b.prepare_write(seq, 0, 8)  # 2 blocks each: rows [0,1], [2,3], [4,5]
    assert b.tables(3)[0].rows == [4, 5] and b.layers[0].capacity == 6
    b.release(1)
    b.release(3)
    assert b.layers[0].free.sorted_rows() == [0, 1, 4, 5]
    b.add_sequence(4)
    b.prepare_write(4, 0, 12)  # 3 blocks: reuse 0, 1, 4 (lowest first), mint nothing
    assert b.tables(4)[0].rows == [0, 1, 4]
    assert b.counters.rows_reused == 3 and b.counters.rows_minted == 6
    assert b.layers[0].free.sorted_rows() == [5]
    b.check_integrity()


def test_clone_shares_by_refcount_and_copy_on_write_on_shared_tail():
    b = book(num_layers=2)
    b.add_sequence(1)
    b.prepare_write(1, 0, 10)
    b.clone(1, 2, 10)
    assert b.block_ids(0, 2) == [0, 1, 2] and refcounts(b, 0, 1) == [2, 2, 2]
    plan = b.prepare_write(2, 10, 1)  # writes into shared block 2 -> copy-on-write
    assert plan.cow_pairs == [[(2, 3)], [(2, 3)]]
    assert b.block_ids(0, 2) == [0, 1, 6] and b.block_ids(1, 2) == [3, 4, 7]
    assert refcounts(b, 0, 1) == [2, 2, 1] and refcounts(b, 0, 2) == [2, 2, 1]
    assert b.counters.cow_copies == 2
    b.release(1)
    assert refcounts(b, 0, 2) == [1, 1, 1]
    assert b.layers[0].free.sorted_rows() == [2]
    b.release(2)
    assert len(b.blocks) == 0 and b.layers[0].free.sorted_rows() == [0, 1, 2, 3]
    b.check_integrity()


def test_detach_adopt_release_handle_no_leak():
    b = book()
    b.add_sequence(1)
    b.prepare_write(1, 0, 8)
    handle = b.detach(1)
    assert handle.num_tokens == 8 and 1 not in b.seqs and b.refcount(0) == 1
    b.adopt(handle, 5)
    b.adopt(handle, 6)
    assert refcounts(b, 0, 5) == [3, 3]
    b.prepare_write(5, 8, 4)  # appends a new block, shares nothing new
    assert b.block_ids(0, 5) == [0, 1, 4]
    b.release_handle(handle)
    with pytest.raises(PoolError, match="unknown or released prefix handle"):
        b.adopt(handle, 9)
    b.release(5)
    b.release(6)
    assert len(b.blocks) == 0 and sum(rows.num_live for rows in b.layers) == 0
    b.check_integrity()


def test_trim_drops_trailing_blocks_and_requires_alignment():
    b = book(num_layers=1)
    b.add_sequence(1)
    b.prepare_write(1, 0, 14)
    with pytest.raises(PoolError, match="not block-aligned"):
        b.trim(1, 6)
    b.trim(1, 8)
    assert b.block_ids(0, 1) == [0, 1] and b.layers[0].free.sorted_rows() == [2, 3]
    assert b.seq_length(1) == 8
    b.check_integrity()


def test_budget_exceeded_changes_nothing():
    b = book(num_layers=2, budget=3)
    b.add_sequence(1)
    b.prepare_write(1, 0, 8)
    before = (b.block_ids(0, 1), b.seq_length(1), b.counters.to_dict(), [r.capacity for r in b.layers])
    with pytest.raises(BudgetExceeded, match="max_blocks_per_layer=3"):
        b.prepare_write(1, 8, 8)  # needs 2 more, budget allows 1
    assert (b.block_ids(0, 1), b.seq_length(1), b.counters.to_dict(), [r.capacity for r in b.layers]) == before
    assert b.can_allocate(1) and not b.can_allocate(2)
    b.check_integrity()


def test_set_slab_blocks_only_before_rows_exist():
    b = book()
    b.set_slab_blocks(3)
    b.add_sequence(1)
    b.prepare_write(1, 0, 4)
    assert b.layers[0].capacity == 3
    with pytest.raises(PoolError, match="before the first write"):
        b.set_slab_blocks(4)


def test_monolithic_models_grow_chunks_and_copied_bytes():
    b = book(num_layers=2, block_size=4, design="monolithic")
    b.add_sequence(1)
    b.prepare_write(1, 0, 4 * 40)  # 40 rows -> 64-row capacity in one presize step
    assert [r.capacity for r in b.layers] == [64, 64]
    assert b.counters.grow_events == 2 and b.counters.bytes_copied == 0
    b.add_sequence(2)
    b.prepare_write(2, 0, 4 * 30)  # 70 rows -> 96
    assert b.counters.grow_events == 4 and b.counters.bytes_copied == 2 * 64 * 100


def test_integrity_detects_corruption():
    b = book()
    b.add_sequence(1)
    b.prepare_write(1, 0, 8)
    b.layers[0].row_refcount[0] = 2
    with pytest.raises(PoolError, match="refcount == number of references"):
        b.check_integrity()
    b.layers[0].row_refcount[0] = 1
    b.layers[1].free.push(3)  # row 3 is minted? no: only rows 0,1 minted -> free row without a row
    with pytest.raises(PoolError, match="free rows"):
        b.check_integrity()


def test_op_log_replays_on_fresh_book_with_other_geometry():
    ops = []
    b = book(num_layers=2)
    b.add_op_listener(ops.append)
    b.add_sequence(1)
    b.prepare_write(1, 0, 10)
    b.clone(1, 2, 6)
    b.prepare_write(2, 6, 5)
    handle = b.detach(1)
    b.adopt(handle, 3)
    b.release_handle(handle)
    b.trim(3, 8)
    b.release(2)
    sequence_ops = [op.name for op in ops if isinstance(op, SequenceOp)]
    assert sequence_ops == ["add_sequence", "prepare_write", "clone", "prepare_write", "detach", "adopt",
                            "release_handle", "trim", "release"]
    assert CopyOnWrite(seq=2, logical_block=1, num_layers=2) in ops
    same, handles = book(num_layers=2), {}
    for op in ops:
        apply_op(same, op, handles)
    assert [r.row_block for r in same.layers] == [r.row_block for r in b.layers]
    assert same.counters == b.counters
    other, handles = BlockBook(2, 2, "slab", 8), {}  # block size 2, 8-row slabs
    for op in ops:
        apply_op(other, op, handles)
    other.check_integrity()
    assert other.seq_length(3) == 8 and len(other.block_ids(0, 3)) == 4


def test_pool_package_import_is_mlx_free():
    code = "import sys, pool, pool.bookkeeping, pool.snapshot, pool.op_apply; print(any(m == 'mlx' or " \
           "m.startswith('mlx.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
