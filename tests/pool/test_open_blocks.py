"""``open_blocks="high"``: a write's partly filled last block (the block the next decode token lands in) takes the top
row of the reserved capacity, so a batch admitted together keeps its open blocks in one slab and a decode step's token
writes touch one slab per layer, not one per sequence. White-box on tiny pools; the fuzz and the stateful machine
(tests/pool/test_pool_fuzz.py, test_pool_stateful.py) run every operation under both policies."""

from __future__ import annotations

import mlx.core as mx
import pytest

from pool import BlockBook, PagedKVPool, PoolConfig, PoolError
from pool.free_rows import FreeRows

from pool_helpers import full_state, make_kv
from pool_writes import write_kv, write_tokens_kv

BS, SLAB = 4, 4  # 16 tokens per slab


def burst_book(open_blocks: str, seqs: int = 4, prompt: int = 15, final: int = 20, budget=None) -> BlockBook:
    """``seqs`` sequences admitted together (capacity reserved for ``final`` tokens each), then prefilled one after
    another in chunks of 8 tokens up to ``prompt`` tokens: the engine's burst, minus the last prompt token."""
    book = BlockBook(1, BS, "slab", SLAB, budget, open_blocks=open_blocks)
    for seq in range(seqs):
        book.add_sequence(seq)
    book.reserve({seq: final for seq in range(seqs)})
    for seq in range(seqs):
        for start in range(0, prompt, 8):
            book.prepare_write(seq, start, min(8, prompt - start))
    book.check_integrity()
    return book


def slabs_of(book: BlockBook, rows) -> set[int]:
    return {row // SLAB for row in rows}


def test_the_open_blocks_of_a_burst_share_the_top_slab():
    low, high = burst_book("low"), burst_book("high")
    low_tails = [low.block_rows(seq)[-1] for seq in range(4)]
    high_tails = [high.block_rows(seq)[-1] for seq in range(4)]
    assert low_tails == [3, 7, 11, 15] and slabs_of(low, low_tails) == {0, 1, 2, 3}  # one slab per sequence
    capacity = high.capacity
    assert low.capacity == 20 and capacity == 24  # 4 x 5 blocks reserved, plus a row to park each
    assert high_tails == [23, 22, 21, 20] and slabs_of(high, high_tails) == {5}
    # the full blocks land where they would have without the policy (each sequence's from a slab boundary): the rows
    # the open blocks would have taken are parked, not given to the next sequence's first block
    for seq in range(4):
        assert high.block_rows(seq)[:-1] == low.block_rows(seq)[:-1] == [4 * seq, 4 * seq + 1, 4 * seq + 2]
    assert high.free.parked_rows() == low_tails
    # the decode step at the block boundary opens the next blocks: the top again, one slab
    for seq in range(4):
        high.prepare_write(seq, 15, 1)
        high.prepare_write(seq, 16, 1)
    high.check_integrity()
    assert slabs_of(high, [high.block_rows(seq)[-1] for seq in range(4)]) == {4}
    assert high.free.parked_rows() == low_tails  # a decode step's open block parks nothing
    assert high.capacity == capacity  # nothing grew past the reservation


def test_counters_count_the_rows_minted_free_once():
    book = burst_book("high")
    counters = book.counters
    assert counters.rows_minted == 24 and counters.rows_minted_free == 20  # row 23 minted for seq 0, 3-22 free
    assert counters.rows_minted - counters.rows_minted_free + counters.rows_reused == counters.blocks_created
    assert book.stats().live_blocks == 16


def test_parked_rows_go_last_and_survive_the_state():
    book = burst_book("high")  # rows 3, 7, 11, 15 parked, 16-19 free, 20-23 the open blocks
    parked = book.free.parked_rows()
    assert parked == [3, 7, 11, 15]
    book.add_sequence(9)
    book.prepare_write(9, 0, 4)  # one full block: the lowest unparked free row, not a parked one
    assert book.block_rows(9) == [16]
    state = book.state()
    assert state.rows.parked == parked
    assert BlockBook.from_state(state, check=True).free.parked_rows() == parked
    import msgspec

    bad = msgspec.structs.replace(state.rows, free=[r for r in state.rows.free if r != 3])
    with pytest.raises(PoolError, match="inconsistent book state"):  # a parked row that is not free
        BlockBook.from_state(msgspec.structs.replace(state, rows=bad), check=True)
    book.prepare_write(9, 4, 16)  # rows 17-19 are the last unparked ones: then the parked rows, lowest first
    assert book.block_rows(9) == [16, 17, 18, 19, 3] and book.free.parked_rows() == [7, 11, 15]
    book.check_integrity()


def test_a_budget_caps_the_top_row():
    book = burst_book("high", seqs=2, budget=9)  # capacity rounds to 12 rows; the budget allows 9 live blocks
    assert book.capacity == 12
    assert book.block_rows(0)[-1] == 8 and max(len(book.row_block), 0) == 9
    book.check_integrity()


def test_without_a_reservation_the_open_block_takes_the_top_of_the_current_capacity():
    book = BlockBook(1, BS, "slab", SLAB, None, open_blocks="high")
    book.add_sequence(0)
    book.add_sequence(1)
    book.prepare_write(0, 0, 6)  # no capacity yet when its rows are picked: minted in order, like "low"
    assert book.block_rows(0) == [0, 1] and book.capacity == 4
    book.prepare_write(1, 0, 2)  # an open block alone (nothing parked): the slab's top row, row 2 minted free
    assert book.block_rows(1) == [3] and book.free.sorted_rows() == [2]
    assert book.free.parked_rows() == []
    book.prepare_write(1, 2, 4)  # fills it and opens the next: the top is taken, so the highest free row
    assert book.block_rows(1) == [3, 2]
    book.check_integrity()


def test_the_policy_survives_the_books_state_and_the_pools_geometry():
    book = burst_book("high")
    again = BlockBook.from_state(book.state(), check=True)
    assert again.open_blocks == "high" and again.state() == book.state()
    for seq in range(4):  # the restored book allocates as the original would
        book.prepare_write(seq, 15, 2)
        again.prepare_write(seq, 15, 2)
    assert again.state() == book.state()
    config = PoolConfig(num_layers=1, block_size=BS, slab_blocks=SLAB, open_blocks="high")
    assert config.open_blocks == "high"
    assert PagedKVPool(config).book.open_blocks == "high"


@pytest.mark.parametrize("bad", ["top", "", None, 1])
def test_an_unknown_policy_is_refused_in_one_line(bad):
    with pytest.raises(PoolError, match="open_blocks must be one of low, high") as info:
        PagedKVPool(PoolConfig(num_layers=1, open_blocks=bad))
    assert "\n" not in str(info.value)
    with pytest.raises(PoolError, match="open_blocks must be one of"):
        BlockBook(1, open_blocks=bad)


def test_a_decode_step_writes_one_slab_per_layer_and_reads_back_what_it_wrote():
    """Through the pool: the first decode step after a burst's prefill writes the last prompt token of every
    sequence; under "high" those slots share one slab (one scatter per layer for K and V), and every sequence's K/V
    reads back byte-identical under both policies."""
    results = {}
    for policy in ("low", "high"):
        pool = PagedKVPool(PoolConfig(num_layers=2, block_size=BS, slab_blocks=SLAB, open_blocks=policy))
        prompts = {seq: make_kv(16, seed=seq) for seq in range(4)}
        for seq in range(4):
            pool.add_sequence(seq)
        pool.reserve({seq: 20 for seq in range(4)})
        for seq, (keys, values) in prompts.items():
            pool.prepare_write(seq, 0, 15)
            for layer in range(2):
                write_kv(pool, layer, seq, 0, keys[:15], values[:15])
        for seq in range(4):
            pool.prepare_write(seq, 15, 1)
        slots = pool.write_slots(list(range(4)), [15] * 4, 1)
        last_k = mx.stack([prompts[seq][0][15] for seq in range(4)])
        last_v = mx.stack([prompts[seq][1][15] for seq in range(4)])
        for layer in range(2):
            write_tokens_kv(pool, layer, slots, last_k, last_v)
        pool.check_integrity()
        groups = slots.layout["storage"]  # the scatters every layer made (one per slab touched)
        results[policy] = (len(groups), slabs_of(pool.book, [rows[0] for rows in slots.rows]))
        for seq, (keys, values) in prompts.items():
            for layer in range(2):
                got = pool.gather_visible(layer, seq)
                assert mx.array_equal(got.keys, keys.transpose(1, 0, 2)), (policy, seq, layer)
                assert mx.array_equal(got.values, values.transpose(1, 0, 2)), (policy, seq, layer)
    assert results["low"] == (4, {0, 1, 2, 3})  # a scatter per sequence, each into its own slab
    assert results["high"] == (1, {5})


def test_a_refused_write_changes_nothing_under_the_policy():
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=BS, slab_blocks=SLAB, max_blocks_per_layer=3,
                                  open_blocks="high"))
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 6)
    before = full_state(pool)
    with pytest.raises(PoolError):
        pool.prepare_write(0, 6, 20)  # past the budget of 3 blocks
    assert full_state(pool) == before


def test_free_rows_pop_from_both_ends_like_sorted_lists_parked_last():
    import random

    rng = random.Random(5)
    free, unparked, parked = FreeRows(), set(), set()
    for _ in range(3000):
        action = rng.random()
        if action < 0.45 or not unparked | parked:
            row = rng.randrange(300)
            if row not in unparked | parked:
                free.push(row)
                unparked.add(row)
        elif action < 0.55 and unparked:
            row = rng.choice(sorted(unparked))
            free.park(row)
            unparked.discard(row)
            parked.add(row)
        elif action < 0.75:
            pool = unparked or parked
            assert free.pop_lowest() == min(pool)
            pool.discard(min(pool))
        elif action < 0.97:
            pool = unparked or parked
            assert free.pop_highest() == max(pool)
            pool.discard(max(pool))
        else:
            first = rng.randrange(300)
            assert free.drop_from(first) == len([r for r in unparked | parked if r >= first])
            unparked, parked = {r for r in unparked if r < first}, {r for r in parked if r < first}
        assert free.sorted_rows() == sorted(unparked | parked) and free.parked_rows() == sorted(parked)
        assert free.lowest_unparked() == (min(unparked) if unparked else None) and free.unparked == len(unparked)
        assert free.heap_consistent()
        assert len(free._heap) <= 2 * len(unparked | parked) + 65  # stale entries stay bounded
    with pytest.raises(IndexError):
        FreeRows().pop_highest()
    with pytest.raises(ValueError, match="row 4 is not a free unparked row"):
        FreeRows().park(4)
