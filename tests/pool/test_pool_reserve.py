"""``PagedKVPool.reserve``: capacity for sequences' final lengths in one measured growth, so the writes that fill it
grow (and wait for the device) no more; the ``reserve`` op replays; bad input changes nothing."""

from __future__ import annotations

import pytest

from pool import BlockBook, PagedKVPool, PoolConfig, PoolError
from pool.op_apply import apply_op
from pool.ops import Reserve, SequenceOp

from pool_helpers import full_state, make_kv
from pool_writes import write_kv

BS, SLAB = 4, 2  # 8 tokens per slab


def counted_windows(monkeypatch) -> list:
    """Every copy-meter window opened from now on (one per measured growth or copy-on-write)."""
    import pool.copy_meter as copy_meter

    opened = []
    original = copy_meter.CopyWindow.__init__

    def init(self, *args, **kwargs):
        opened.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(copy_meter.CopyWindow, "__init__", init)
    return opened


def prefill(pool, seq: int, start: int, tokens: int, chunk: int) -> None:
    """Write ``tokens`` tokens from ``start`` in chunks (as a chunked prefill does), every layer."""
    keys, values = make_kv(tokens, seed=seq)
    for lo in range(0, tokens, chunk):
        n = min(chunk, tokens - lo)
        pool.prepare_write(seq, start + lo, n)
        for layer in range(pool.config.num_layers):
            write_kv(pool, layer, seq, start + lo, keys[lo:lo + n], values[lo:lo + n])


def started(num_seqs: int, design: str = "slab", budget=None) -> PagedKVPool:
    """A pool whose layers have storage (one token written per sequence), sequences 0..num_seqs-1."""
    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=BS, slab_blocks=SLAB, design=design,
                                  max_blocks_per_layer=budget))
    for seq in range(num_seqs):
        pool.add_sequence(seq)
        prefill(pool, seq, 0, 1, 1)
    return pool


@pytest.mark.parametrize("design", ["slab", "monolithic"])
def test_reserve_grows_once_and_the_writes_it_covers_grow_nothing(monkeypatch, design):
    pool = started(3, design)
    lengths = {0: 150, 1: 70, 2: 40}  # 38 + 18 + 10 blocks; each sequence already holds one
    windows = counted_windows(monkeypatch)
    pool.reserve(lengths)
    assert len(windows) == 1, "one measured growth for every sequence at once"
    capacity = pool.book.capacity
    assert capacity == (96 if design == "monolithic" else 66)  # 66 blocks in slabs of 2 rows / 32-row chunks
    appends = pool.counters().slab_appends
    for seq, length in lengths.items():
        prefill(pool, seq, 1, length - 1, 8)
    pool.check_integrity()
    assert len(windows) == 1 and pool.counters().slab_appends == appends, "a write inside the reservation grew"
    assert pool.book.capacity == capacity and pool.stats().live_blocks == 2 * 66


def test_without_a_reservation_the_same_writes_grow_at_every_slab(monkeypatch):
    """The cost the reservation removes: each slab the prefills fill is one measured growth."""
    pool = started(3)
    windows = counted_windows(monkeypatch)
    for seq, length in {0: 150, 1: 70, 2: 40}.items():
        prefill(pool, seq, 1, length - 1, 8)
    assert len(windows) == 31  # 2 slabs held -> 33: one growth per slab (8-token chunks fill one slab each)


def test_reserve_counts_free_rows_and_is_a_noop_when_capacity_holds(monkeypatch):
    pool = started(2)
    prefill(pool, 0, 1, 23, 8)  # sequence 0: 6 blocks
    pool.release(0)  # 6 rows free (rows 0, 2..6 minus sequence 1's row)
    capacity = pool.book.capacity
    windows = counted_windows(monkeypatch)
    pool.reserve({1: 24})  # 5 more blocks: all taken from free rows
    assert not windows and pool.book.capacity == capacity
    pool.reserve({1: 4 * BS})  # fewer tokens than it will write: nothing more either
    pool.reserve({1: 0})
    assert not windows and pool.book.capacity == capacity


def test_reserve_holds_a_copy_for_a_shared_partial_tail():
    """A clone sharing a partial last block copies it at its next write: one block more than its table's end."""
    pool = started(1)
    prefill(pool, 0, 1, 5, 5)  # 6 tokens: 2 blocks, the second partial
    pool.clone(0, 1, 6)
    minted = len(pool.book.row_block)
    pool.reserve({1: 8})  # inside its blocks, but the shared tail must be copied: one row
    assert pool.book.capacity >= minted + 1
    before = pool.book.capacity
    prefill(pool, 1, 6, 2, 2)
    assert pool.book.capacity == before
    pool.check_integrity()


def test_reserve_stops_at_the_budget():
    pool = started(1, budget=5)
    pool.reserve({0: 1000})
    assert pool.book.capacity == 6  # 5 blocks rounded up to whole slabs of 2 rows, not 250 blocks
    pool.check_integrity()


def test_reserve_past_the_budget_is_checked_against_memory_for_what_it_holds():
    """The memory check counted every block a reservation asked for, though the reservation stops at the budget: a
    pool with room for its budget was refused a reservation it could hold. Room here: 6 rows per layer (3 slabs)."""
    from pool.limits import MemoryLimits

    pool = started(1, budget=5)
    row_bytes = pool.book.bytes_per_row
    pool.limits = pool.book.limits = MemoryLimits(memory_bytes=2 * 6 * row_bytes, max_buffer_bytes=1 << 40,
                                                  source="test room")
    pool.reserve({0: 1000})  # 250 blocks asked, 5 held (6 rows): fits
    assert pool.book.capacity == 6
    pool.check_integrity()


@pytest.mark.parametrize("bad, match", [({7: 10}, "unknown sequence 7"), ({0: -1}, "reserved length"),
                                        ({0: 2.5}, "reserved length"), ([(0, 10)], "seq id: tokens")])
def test_bad_reservations_change_nothing(bad, match):
    pool = started(2)
    before = full_state(pool)
    with pytest.raises(PoolError, match=match):
        pool.reserve(bad)
    assert full_state(pool) == before


def test_reserve_replays_from_the_op_log():
    """A fresh book fed the sequence-level ops reaches the same capacity (what-if replays and rebuilt snapshots)."""
    pool = started(2)
    ops = []
    pool.add_op_listener(ops.append)
    pool.reserve({0: 20, 1: 40})
    prefill(pool, 0, 1, 10, 4)
    assert [op for op in ops if isinstance(op, Reserve)] == [Reserve(seqs=[0, 1], lengths=[20, 40])]
    replay = BlockBook(2, BS, "slab", SLAB)
    for seq in (0, 1):
        replay.add_sequence(seq)
        replay.prepare_write(seq, 0, 1)
    handles: dict = {}
    for op in ops:
        if isinstance(op, SequenceOp):
            apply_op(replay, op, handles)
    assert replay.capacity == pool.book.capacity
    replay.check_integrity()


def test_integrity_allows_reserved_capacity_but_not_partial_slabs():
    pool = started(1)
    pool.reserve({0: 40})
    pool.check_integrity()  # capacity beyond the minted rows, in whole slabs
    pool.book.capacity += 1
    with pytest.raises(PoolError, match="whole slabs/chunks"):
        pool.book.check_integrity()
