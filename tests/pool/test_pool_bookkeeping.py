"""White-box tests of the plain-Python bookkeeping on tiny books: exact ids, rows, refcounts, free rows, slabs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pool import BlockBook, BudgetExceeded, PoolError, SequenceOp, apply_op
from pool.ops import CopyOnWrite


def book(num_layers=2, block_size=4, slab_blocks=2, design="slab", budget=None):
    return BlockBook(num_layers, block_size, design, slab_blocks, budget, bytes_per_row=100)


def ids(b, seq):
    return list(b.table(seq).block_ids)


def rows(b, seq):
    return list(b.table(seq).rows)


def refcounts(b, seq):
    return [b.refcount(block) for block in ids(b, seq)]


def test_one_table_per_sequence_one_row_space_rows_minted_lazily():
    b = book()
    b.add_sequence(7)
    assert b.row_block == [] and b.capacity == 0  # no rows before a write
    version = b.version
    b.prepare_write(7, 0, 10)  # 3 blocks of 4 tokens: one block id and one row each, shared by both layers
    assert ids(b, 7) == [0, 1, 2] and rows(b, 7) == [0, 1, 2] and b.row_block == [0, 1, 2]
    assert b.seq_length(7) == 10 and b.version > version
    assert b.capacity == 4  # 2 slabs of 2 rows, in every layer
    assert b.counters.slab_appends == 4 and b.counters.rows_minted == 6  # counted over the 2 layers
    assert b.stats().allocated_blocks == 6 and b.stats().bytes_reserved == 4 * 2 * 100
    version = b.version
    b.prepare_write(7, 10, 2)  # fills block 2: no new block, no row change
    assert ids(b, 7) == [0, 1, 2] and b.seq_length(7) == 12 and b.version == version
    b.check_integrity()


def test_freed_rows_reused_lowest_first_before_minting():
    b = book(num_layers=1)
    for seq in (1, 2, 3):
        b.add_sequence(seq)
        b.prepare_write(seq, 0, 8)  # 2 blocks each: rows [0,1], [2,3], [4,5]
    assert rows(b, 3) == [4, 5] and b.capacity == 6
    b.release(1)
    b.release(3)
    assert b.free.sorted_rows() == [0, 1, 4, 5]
    b.add_sequence(4)
    b.prepare_write(4, 0, 12)  # 3 blocks: reuse 0, 1, 4 (lowest first), mint nothing
    assert rows(b, 4) == [0, 1, 4]
    assert b.counters.rows_reused == 3 and b.counters.rows_minted == 6
    assert b.free.sorted_rows() == [5]
    b.check_integrity()


def test_clone_shares_by_refcount_and_copy_on_write_copies_one_row_for_every_layer():
    b = book(num_layers=2)
    b.add_sequence(1)
    b.prepare_write(1, 0, 10)
    b.clone(1, 2, 10)
    assert ids(b, 2) == [0, 1, 2] and refcounts(b, 1) == [2, 2, 2]
    plan = b.prepare_write(2, 10, 1)  # writes into shared block 2 -> copy-on-write: one pair, every layer copies it
    assert plan.cow_pairs == [(2, 3)] and plan.growth is None
    assert ids(b, 2) == [0, 1, 3] and rows(b, 2) == [0, 1, 3]
    assert refcounts(b, 1) == [2, 2, 1] and refcounts(b, 2) == [2, 2, 1]
    assert b.counters.cow_copies == 2  # one row copied in each of the 2 layers
    b.release(1)
    assert refcounts(b, 2) == [1, 1, 1]
    assert b.free.sorted_rows() == [2]
    b.release(2)
    assert len(b.blocks) == 0 and b.free.sorted_rows() == [0, 1, 2, 3]
    b.check_integrity()


def test_detach_adopt_release_handle_no_leak():
    b = book()
    b.add_sequence(1)
    b.prepare_write(1, 0, 8)
    handle = b.detach(1)
    assert handle.num_tokens == 8 and 1 not in b.seqs and b.refcount(0) == 1
    b.adopt(handle, 5)
    b.adopt(handle, 6)
    assert refcounts(b, 5) == [3, 3]
    b.prepare_write(5, 8, 4)  # appends a new block, shares nothing new
    assert ids(b, 5) == [0, 1, 2]
    b.release_handle(handle)
    with pytest.raises(PoolError, match="unknown or released prefix handle"):
        b.adopt(handle, 9)
    b.release(5)
    b.release(6)
    assert len(b.blocks) == 0 and b.num_live == 0
    b.check_integrity()


def test_trim_drops_trailing_blocks_and_requires_alignment():
    b = book(num_layers=1)
    b.add_sequence(1)
    b.prepare_write(1, 0, 14)
    with pytest.raises(PoolError, match="not block-aligned"):
        b.trim(1, 6)
    b.trim(1, 8)
    assert ids(b, 1) == [0, 1] and b.free.sorted_rows() == [2, 3]
    assert b.seq_length(1) == 8
    b.check_integrity()


def test_budget_exceeded_changes_nothing():
    b = book(num_layers=2, budget=3)
    b.add_sequence(1)
    b.prepare_write(1, 0, 8)
    before = b.state()
    with pytest.raises(BudgetExceeded, match="max_blocks_per_layer=3"):
        b.prepare_write(1, 8, 8)  # needs 2 more, budget allows 1
    assert b.state() == before
    assert b.can_allocate(1) and not b.can_allocate(2)
    b.check_integrity()


def test_set_slab_blocks_only_before_rows_exist():
    b = book()
    b.set_slab_blocks(3)
    b.add_sequence(1)
    b.prepare_write(1, 0, 4)
    assert b.capacity == 3
    with pytest.raises(PoolError, match="before the first write"):
        b.set_slab_blocks(4)


def test_monolithic_models_grow_chunks_and_copied_bytes():
    b = book(num_layers=2, block_size=4, design="monolithic")
    b.add_sequence(1)
    b.prepare_write(1, 0, 4 * 40)  # 40 rows -> 64-row capacity in one presize step
    assert b.capacity == 64
    assert b.counters.grow_events == 2 and b.counters.bytes_copied == 0
    b.add_sequence(2)
    b.prepare_write(2, 0, 4 * 30)  # 70 rows -> 96: every layer copies its 64 old rows
    assert b.counters.grow_events == 4 and b.counters.bytes_copied == 2 * 64 * 100


def test_integrity_detects_corruption():
    b = book()
    b.add_sequence(1)
    b.prepare_write(1, 0, 8)
    b.row_refcount[0] = 2
    with pytest.raises(PoolError, match="refcount == number of references"):
        b.check_integrity()
    b.row_refcount[0] = 1
    b.free.push(3)  # only rows 0, 1 minted: a free row that is no row
    with pytest.raises(PoolError, match="free rows"):
        b.check_integrity()
    b.free = type(b.free)()
    b.table(1).rows[1] = 0  # a table pointing at another block's row
    with pytest.raises(PoolError, match="table rows match block rows"):
        b.check_integrity()
    b.table(1).rows[1] = 1
    b.counters.cow_copies += 1  # one layer's worth: a row event is counted in every layer
    with pytest.raises(PoolError, match="multiples of num_layers"):
        b.check_integrity()
    b.counters.cow_copies -= 1
    b.counters.blocks_created += 2  # a block created in both layers that no table holds
    with pytest.raises(PoolError, match="blocks created - rows freed == live blocks"):
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
    assert same.row_block == b.row_block and same.row_refcount == b.row_refcount
    assert same.counters == b.counters
    other, handles = BlockBook(2, 2, "slab", 8), {}  # block size 2, 8-row slabs
    for op in ops:
        apply_op(other, op, handles)
    other.check_integrity()
    assert other.seq_length(3) == 8 and len(ids(other, 3)) == 4


def test_pool_package_import_is_mlx_free():
    code = "import sys, pool, pool.bookkeeping, pool.snapshot, pool.op_apply; print(any(m == 'mlx' or " \
           "m.startswith('mlx.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
