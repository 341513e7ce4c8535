"""A step's writes: ``write_slots`` (plain Python, no mlx) resolves the rows once for every layer, ``write``
executes them in each layer (one scatter per slab touched for one token per sequence, slice updates for spans),
stale slots refused, and ``prepare_write``'s decode fast path.

The bookkeeping tests use :class:`BlockBook` alone and never import mlx (the subprocess test proves the modules they
use stay mlx-free); the storage tests import mlx inside the test functions.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pool import BlockBook, PoolError, WritePlan, WriteSlots, apply_op
from pool.ops import CopyOnWrite, PrepareWrite, RowMint, SlabAppend
from pool.write_slots import check_current, resolve_write_slots

from pool_helpers import full_state, make_kv
from pool_writes import write_kv, write_tokens_kv

ROOT = Path(__file__).resolve().parents[2]
DESIGNS = ["slab", "monolithic"]


# ---- bookkeeping (no mlx) ------------------------------------------------------------------------------------------
def book(num_layers=2, block_size=4, slab_blocks=2):
    return BlockBook(num_layers, block_size, "slab", slab_blocks, None, bytes_per_row=100)


def book_state(b, with_lengths=True):
    """Everything the bookkeeping holds (compared before/after a call that must read only)."""
    tables = {seq: (t.block_ids[:], t.rows[:], t.length if with_lengths else None, t.logical_start)
              for seq, t in b.seqs.items()}
    rows = (b.row_block[:], b.row_refcount[:], b.free.sorted_rows(), b.capacity)
    return tables, rows, b.counters.to_dict(), b.version, sorted(b.blocks.items())


def test_write_slots_name_each_sequences_rows_once_for_every_layer():
    b = book()
    b.add_sequence(3)
    b.prepare_write(3, 0, 6)  # rows [0, 1]
    b.add_sequence(7)
    b.prepare_write(7, 0, 4)  # row [2]
    b.prepare_write(3, 6, 1)  # inside block 1
    b.prepare_write(7, 4, 1)  # a new block: row 3
    assert b.table(3).rows == [0, 1] and b.table(7).rows == [2, 3]
    before = book_state(b)
    slots = resolve_write_slots(b, [7, 3], (p for p in (4, 6)), 1)
    assert slots == WriteSlots(seq_ids=(7, 3), starts=(4, 6), num_tokens=1, rows=((3,), (1,)), version=b.version)
    spans = resolve_write_slots(b, [3, 7], [2, 0], 3)  # positions 2..4 of 3: blocks 0, 1; 0..2 of 7: block 0
    assert spans.rows == ((0, 1), (2,)) and spans.num_tokens == 3
    assert book_state(b) == before
    check_current(b, slots)
    b.check_integrity()


def test_write_slots_bad_input_raises_and_changes_nothing():
    b = book()
    b.add_sequence(1)
    b.prepare_write(1, 0, 10)  # blocks 0..2
    b.clone(1, 2, 10)  # every block shared
    b.add_sequence(3)
    b.prepare_write(3, 0, 2)
    cases = [
        (([1], [10], 1), "sequence 1: position 10 is not prepared \\(length 10\\)"),
        (([3, 1], [1, -1], 1), "sequence 1: position -1 is not prepared"),
        (([2], [9], 1), "the target block of sequence 2 is shared"),
        (([3, 2, 1], [1, 9, 0], 1), "sequence 2 is shared"),
        (([2], [4], 2), "sequence 2: blocks \\[1\\] are shared"),
        (([1], [8], 3), "positions \\[8, 11\\) are not prepared"),
        (([1, 1], [9, 9], 1), "a sequence appears twice in \\[1, 1\\]"),
        (([], [], 1), "at least one sequence"),
        (([1], [9, 8], 1), "one start per sequence"),
        (([42], [0], 1), "unknown sequence 42"),
        (([3], [0], 0), "num_tokens must be"),
        (([3], [True], 1), "must be an int"),
    ]
    for (seq_ids, starts, num_tokens), message in cases:
        before = book_state(b)
        with pytest.raises(PoolError, match=message):
            resolve_write_slots(b, seq_ids, starts, num_tokens)
        assert book_state(b) == before, message
    b.check_integrity()


def test_check_current_refuses_slots_after_release_or_copy_on_write():
    b = book()
    for seq, tokens in ((1, 5), (2, 3)):
        b.add_sequence(seq)
        b.prepare_write(seq, 0, tokens)
    slots = resolve_write_slots(b, [1, 2], [4, 2], 1)
    b.prepare_write(2, 3, 1)  # inside an owned block: lengths only, the rows (and the slots) stay current
    check_current(b, slots)
    b.release(2)
    b.add_sequence(2)
    b.prepare_write(2, 0, 3)  # takes back its old row
    assert b.table(2).rows == [2]
    with pytest.raises(PoolError, match="write slots are stale"):
        check_current(b, slots)
    fresh = resolve_write_slots(b, [1, 2], [4, 2], 1)
    b.clone(1, 5, 5)
    b.prepare_write(1, 4, 1)  # block 1 shared -> copied on write: sequence 1 moves to a new row
    assert b.table(1).rows == [0, 3] and fresh.rows[0] == (1,)
    with pytest.raises(PoolError, match="stale"):
        check_current(b, fresh)
    assert resolve_write_slots(b, [1], [4], 1).rows == ((3,),)
    b.check_integrity()


def test_prepare_write_inside_owned_blocks_moves_only_lengths():
    b = book()
    ops = []
    b.add_op_listener(ops.append)
    b.add_sequence(1)
    b.prepare_write(1, 0, 5)  # blocks 0, 1 on rows 0, 1; capacity one slab (2 rows)
    before, replay_from = book_state(b, with_lengths=False), len(ops)
    assert b.prepare_write(1, 5, 3) == WritePlan(cow_pairs=[], growth=None)  # tokens 5..7: inside block 1
    assert b.prepare_write(1, 0, 2) == WritePlan(cow_pairs=[], growth=None)  # rewrite inside block 0
    assert ops[replay_from:] == [PrepareWrite(seq=1, start=5, num_tokens=3), PrepareWrite(seq=1, start=0, num_tokens=2)]
    assert book_state(b, with_lengths=False) == before  # no row minted, no version bumped, no capacity
    assert b.table(1).length == 8
    del ops[:]
    plan = b.prepare_write(1, 8, 1)  # block 2 does not exist yet: the full path
    assert plan == WritePlan(cow_pairs=[], growth=(2, 4))  # one growth, executed in every layer
    assert ops == [RowMint(layer_count=2, rows=[2], minted=2, reused=0), SlabAppend(layers=2, count=2, bytes=400),
                   PrepareWrite(seq=1, start=8, num_tokens=1)]
    b.check_integrity()


def test_prepare_write_on_a_shared_block_falls_back_to_copy_on_write():
    b = book()
    ops = []
    b.add_op_listener(ops.append)
    b.add_sequence(1)
    b.prepare_write(1, 0, 6)  # rows 0, 1
    b.clone(1, 2, 6)  # both blocks shared
    before = book_state(b)
    plan = b.prepare_write(2, 6, 1)  # inside block 1, which is shared: copy it on write
    assert plan == WritePlan(cow_pairs=[(1, 2)], growth=(2, 4))
    assert book_state(b) != before and CopyOnWrite(seq=2, logical_block=1, num_layers=2) in ops
    assert b.table(2).rows == [0, 2] and b.table(1).rows == [0, 1]
    assert [b.row_refcount[row] for row in (0, 1, 2)] == [2, 1, 1]
    version = b.version
    assert b.prepare_write(2, 7, 1) == WritePlan([], None)  # its block 1 is its own now
    assert b.prepare_write(1, 6, 1) == WritePlan([], None)  # and so is sequence 1's (block 0 is not in span)
    assert b.version == version
    with pytest.raises(PoolError, match="shared"):
        resolve_write_slots(b, [1], [0], 1)  # block 0 is still shared
    replay, handles = book(), {}
    for op in ops:
        apply_op(replay, op, handles)
    assert book_state(replay)[:2] == book_state(b)[:2]
    b.check_integrity()


def test_write_slots_and_fast_path_run_without_mlx():
    code = ("import sys\n"
            "from pool import BlockBook\n"
            "from pool.write_slots import check_current, resolve_write_slots\n"
            "b = BlockBook(2, 4, 'slab', 2)\n"
            "b.add_sequence(0); b.prepare_write(0, 0, 3); plan = b.prepare_write(0, 3, 1)\n"
            "slots = resolve_write_slots(b, [0], [3], 1); check_current(b, slots)\n"
            "view = b.step_view([0])\n"
            "print(plan.growth, slots.rows, view.rows, any(m == 'mlx' or m.startswith('mlx.') for m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "None ((0,),) ((0,),) False"


# ---- storage (mlx) -------------------------------------------------------------------------------------------------
def prefilled_pool(tiny_pool, design, slab_blocks, lengths, num_layers=2, written_layers=None):
    """Sequences ``lengths`` {seq: tokens} (block size 2) prepared in every layer and written in the first
    ``written_layers`` (all by default), in that order. Returns the pool and what was written:
    {(seq, layer): [(K, V), ...]} in position order."""
    pool = tiny_pool(design, num_layers=num_layers, block_size=2, slab_blocks=slab_blocks)
    written = {}
    for seq, tokens in lengths.items():
        pool.add_sequence(seq)
        pool.prepare_write(seq, 0, tokens)
        for layer in range(num_layers if written_layers is None else written_layers):
            keys, values = make_kv(tokens, seed=10 * seq + layer)
            write_kv(pool, layer, seq, 0, keys, values)
            written[seq, layer] = [(keys, values)]
    return pool, written


def raw_slabs(pool):
    """New, evaluated references to every layer's K and V tensors: a later store replaces the pool's, not these."""
    import mlx.core as mx

    slabs = [[mx.array(t) for t in tensors] for tensors in pool.storage.tensor_lists()]
    mx.eval(slabs)
    return slabs


def same_slabs(first, second) -> bool:
    import mlx.core as mx

    return len(first) == len(second) and all(
        len(a) == len(b) and all(mx.array_equal(x, y).item() for x, y in zip(a, b)) for a, b in zip(first, second))


def assert_gathers_match(pool, written):
    """Every (sequence, layer) gathers exactly the tokens written to it, then zeros up to the sequence's length
    (positions prepared but not written yet: slabs start zero-filled and copy-on-write copies the zeros)."""
    import mlx.core as mx

    for (seq, layer), chunks in written.items():
        got = pool.gather_visible(layer, seq)
        unwritten = pool.step_view([seq]).lengths[0] - sum(k.shape[0] for k, _ in chunks)
        zeros = mx.zeros((unwritten, *chunks[0][0].shape[1:]), dtype=chunks[0][0].dtype)
        ref_k = mx.concatenate([k for k, _ in chunks] + [zeros]).transpose(1, 0, 2)
        ref_v = mx.concatenate([v for _, v in chunks] + [zeros]).transpose(1, 0, 2)
        assert mx.array_equal(got.keys, ref_k) and mx.array_equal(got.values, ref_v), (seq, layer)


def describe(groups):
    """(slab, local rows, token offsets, picks) per group; picks as a take's indices or a slice's bounds."""
    return [(slab, local.tolist(), tokens.tolist(), picks if picks is None or isinstance(picks, tuple) else
             picks.tolist()) for slab, local, tokens, picks in groups]


SCENARIOS = {  # name: (slab_blocks, prefill {seq: tokens}, slots order); block size 2
    "different_slabs": (2, {0: 3, 1: 4, 2: 1}, [1, 0, 2]),  # step 0 targets rows 5, 1, 4: slabs 2, 0, 2
    "same_slab": (4, {0: 3, 1: 1}, [0, 1]),  # step 0 targets rows 1, 2: both in slab 0
}
FIRST_STEP_GROUPS = {  # (slab, local rows, token offsets, entry picks: a take's indices or a slice's bounds)
    ("slab", "different_slabs"): [(2, [1, 0], [0, 1], [0, 2]), (0, [1], [1], (1, 2))],
    ("monolithic", "different_slabs"): [(0, [5, 1, 4], [0, 1, 1], None)],
    ("slab", "same_slab"): [(0, [1, 2], [1, 1], None)],
    ("monolithic", "same_slab"): [(0, [1, 2], [1, 1], None)],
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("design", DESIGNS)
def test_one_token_batch_write_stores_the_bytes_of_per_sequence_writes(tiny_pool, monkeypatch, design, scenario):
    slab_blocks, lengths, order = SCENARIOS[scenario]
    single_pool, written = prefilled_pool(tiny_pool, design, slab_blocks, lengths)
    batch_pool, _ = prefilled_pool(tiny_pool, design, slab_blocks, lengths)
    built = []
    build = batch_pool.storage._token_groups
    monkeypatch.setattr(batch_pool.storage, "_token_groups", lambda rows, offsets: built.append(rows) or build(
        rows, offsets))
    for step in range(3):  # later steps cross into new blocks (and, for the slab design, new slabs)
        positions = list(batch_pool.step_view(order).lengths)
        for pool in (single_pool, batch_pool):
            for seq, position in zip(order, positions):
                pool.prepare_write(seq, position, 1)
        slots = batch_pool.write_slots(order, positions, 1)
        for layer in range(2):
            keys, values = make_kv(len(order), seed=100 + 10 * step + layer)
            for i, (seq, position) in enumerate(zip(order, positions)):  # one sequence at a time: the reference
                write_kv(single_pool, layer, seq, position, keys[i:i + 1], values[i:i + 1])
            write_tokens_kv(batch_pool, layer, slots, keys, values)
            for i, seq in enumerate(order):
                written[seq, layer].append((keys[i:i + 1], values[i:i + 1]))
        assert len(built) == step + 1  # the second layer reused the first layer's index arrays (slots.layout)
        groups = slots.layout["storage"]
        touched = {batch_pool.storage._slab_for_row(rows[0])[0] for rows in slots.rows}
        assert len(groups) == len(touched) and {group[0] for group in groups} == touched
        if step == 0:
            assert describe(groups) == FIRST_STEP_GROUPS[design, scenario]
        assert same_slabs(raw_slabs(batch_pool), raw_slabs(single_pool))
        assert_gathers_match(batch_pool, written)
    batch_pool.check_integrity()


FIRST_CHUNK_SPANS = {  # (design, rows per slab): (slab, row in slab, first token, end token, full rows, position)
    ("slab", 8): [(0, 0, 0, 24, 6, 0)], ("monolithic", 8): [(0, 0, 0, 24, 6, 0)],
    ("slab", 4): [(0, 0, 0, 16, 4, 0), (1, 0, 16, 24, 2, 0)],  # sequence 2's rows open slab 1
    ("monolithic", 4): [(0, 0, 0, 24, 6, 0)],
}


@pytest.mark.parametrize("slab_blocks", [8, 4])
@pytest.mark.parametrize("design", DESIGNS)
def test_a_batched_chunk_writes_one_span_across_sequences_whose_rows_follow(tiny_pool, design, slab_blocks):
    """Three sequences prefilled together take consecutive rows: their full blocks are one update per slab (the
    batch's tokens in one axis); partial blocks stay updates of their own. The slabs hold exactly what writing
    each sequence alone stores."""
    import mlx.core as mx

    batch_pool = tiny_pool(design, block_size=4, slab_blocks=slab_blocks)
    single_pool = tiny_pool(design, block_size=4, slab_blocks=slab_blocks)
    written = {}
    for start, tokens in ((0, 8), (8, 6)):  # two full blocks each, then a full block and a partial one each
        for pool in (batch_pool, single_pool):
            for seq in (0, 1, 2):
                if start == 0:
                    pool.add_sequence(seq)
                pool.prepare_write(seq, start, tokens)
        slots = batch_pool.write_slots([0, 1, 2], [start] * 3, tokens)
        for layer in range(2):
            parts = [make_kv(tokens, seed=100 * start + 10 * layer + seq) for seq in (0, 1, 2)]
            batch_pool.write(layer, slots, mx.stack([k for k, _ in parts]), mx.stack([v for _, v in parts]))
            for seq, (keys, values) in enumerate(parts):
                write_kv(single_pool, layer, seq, start, keys, values)
                written.setdefault((seq, layer), []).append((keys, values))
        if start == 0:  # rows 0-5: one span of full blocks over the 24 tokens per slab they lie in
            assert slots.layout["storage"] == FIRST_CHUNK_SPANS[design, slab_blocks]
        else:  # per sequence a full block and a partial one (rows 6-11): nothing to join
            assert [span[4] for span in slots.layout["storage"]] == [1, 0, 1, 0, 1, 0]
    assert same_slabs(raw_slabs(batch_pool), raw_slabs(single_pool))
    assert_gathers_match(batch_pool, written)
    batch_pool.check_integrity()


@pytest.mark.parametrize("design", DESIGNS)
def test_rows_at_the_same_place_of_another_slab_are_not_joined(tiny_pool, design):
    """Sequence 0 takes rows 0-1 (slab 0, rows 0-1 of 4) and sequence 1 rows 6-7 (slab 1, rows 2-3): the second
    run starts where the first would continue, but in another slab (the monolithic tensor: not consecutive)."""
    import mlx.core as mx

    pools = [tiny_pool(design, block_size=4, slab_blocks=4) for _ in range(2)]
    for pool in pools:
        for seq, tokens in ((10, 8), (11, 16), (12, 8)):  # rows 0-1, 2-5, 6-7
            pool.add_sequence(seq)
            pool.prepare_write(seq, 0, tokens)
        pool.release(10)
        pool.release(12)
        for seq in (0, 1):
            pool.add_sequence(seq)
            pool.prepare_write(seq, 0, 8)
    batch_pool, single_pool = pools
    assert [batch_pool.book.table(seq).rows for seq in (0, 1)] == [[0, 1], [6, 7]]
    slots = batch_pool.write_slots([0, 1], [0, 0], 8)
    written = {}
    for layer in range(2):
        parts = [make_kv(8, seed=10 * layer + seq) for seq in (0, 1)]
        batch_pool.write(layer, slots, mx.stack([k for k, _ in parts]), mx.stack([v for _, v in parts]))
        for seq, (keys, values) in enumerate(parts):
            write_kv(single_pool, layer, seq, 0, keys, values)
            written[seq, layer] = [(keys, values)]
    assert len(slots.layout["storage"]) == 2
    assert same_slabs(raw_slabs(batch_pool), raw_slabs(single_pool))
    assert_gathers_match(batch_pool, written)


def _change_rows_after_resolving(pool, written, change):
    """Make slots resolved for sequences 0 and 1 at position 3 stale. Returns the positions to resolve afresh."""
    if change == "release_and_re_add":
        pool.release(1)
        pool.add_sequence(1)
        pool.prepare_write(1, 0, 4)  # takes back rows 2, 3: the stale slots point into its new tokens
        assert pool.book.table(1).rows == [2, 3]
        for layer in range(2):
            keys, values = make_kv(4, seed=50 + layer)
            write_kv(pool, layer, 1, 0, keys, values)
            written[1, layer] = [(keys, values)]
        pool.prepare_write(1, 4, 1)
        return [3, 4]
    pool.clone(0, 5, 4)  # shares sequence 0's blocks, including the target block (row 1) and its position 3
    pool.prepare_write(0, 3, 1)  # copy-on-write: sequence 0's target block moves to a new row
    assert pool.book.table(0).rows == [0, 4] and pool.book.table(5).rows == [0, 1]
    for layer in range(2):
        written[5, layer] = [written[0, layer][0]]  # position 3: never written (zeros)
    return [3, 3]


@pytest.mark.parametrize("change", ["release_and_re_add", "copy_on_write"])
@pytest.mark.parametrize("design", DESIGNS)
def test_stale_token_slots_raise_and_write_nothing(tiny_pool, design, change):
    pool, written = prefilled_pool(tiny_pool, design, 2, {0: 3, 1: 3})
    for seq in (0, 1):
        pool.prepare_write(seq, 3, 1)
    slots = pool.write_slots([0, 1], [3, 3], 1)
    positions = _change_rows_after_resolving(pool, written, change)
    keys, values = make_kv(2, seed=77)
    for layer in range(2):
        before, slabs = full_state(pool), raw_slabs(pool)
        with pytest.raises(PoolError, match="write slots are stale"):
            write_tokens_kv(pool, layer, slots, keys, values)
        assert same_slabs(raw_slabs(pool), slabs) and full_state(pool) == before
        pool.check_integrity()
    assert_gathers_match(pool, written)  # the re-added / cloned sequence kept its tokens
    fresh = pool.write_slots([0, 1], positions, 1)
    for layer in range(2):
        write_tokens_kv(pool, layer, fresh, keys, values)
        for i, seq in enumerate((0, 1)):
            written[seq, layer].append((keys[i:i + 1], values[i:i + 1]))
    assert_gathers_match(pool, written)
    pool.check_integrity()


def _bad_token_writes(pool, slots):
    import mlx.core as mx
    import numpy as np

    keys, values = make_kv(2, seed=9)
    return [
        (lambda: write_tokens_kv(pool, 0, slots, keys[:1], values[:1]), "must both be \\[2, 1,"),
        (lambda: write_tokens_kv(pool, 0, slots, *make_kv(3)), "must both be \\[2, 1,"),
        (lambda: write_tokens_kv(pool, 0, slots, keys.astype(mx.float16), values.astype(mx.float16)),
         "stores float32 .* got float16"),
        (lambda: write_tokens_kv(pool, 1, slots, *make_kv(2, n_kv_heads=3)),
         "n_kv_heads=2.*got float32 \\[n_kv_heads=3"),
        (lambda: write_tokens_kv(pool, 0, slots, *make_kv(2, head_dim=8)),
         "head_dim=4\\] in every layer; got .*head_dim=8"),
        (lambda: write_tokens_kv(pool, 0, slots, keys, values[:, :1]), "must both be"),
        (lambda: write_tokens_kv(pool, 0, slots, keys[:, None], values[:, None]), "must both be"),
        (lambda: write_tokens_kv(pool, 0, slots, keys.astype(mx.int32), values.astype(mx.int32)), "dtype must"),
        (lambda: pool.write(0, slots, np.zeros((2, 1, 2, 4)), values[:, None]), "must be mx.array"),
        (lambda: write_tokens_kv(pool, 3, slots, keys, values), "layer 3 out of range"),
    ]


@pytest.mark.parametrize("design", DESIGNS)
def test_one_token_write_bad_input_raises_and_changes_nothing(tiny_pool, design):
    pool, written = prefilled_pool(tiny_pool, design, 2, {0: 3, 1: 3}, num_layers=3)
    for seq in (0, 1):
        pool.prepare_write(seq, 3, 1)
    slots = pool.write_slots([0, 1], [3, 3], 1)
    for call, message in _bad_token_writes(pool, slots):
        before, slabs = full_state(pool), raw_slabs(pool)
        with pytest.raises(PoolError, match=message):
            call()
        assert full_state(pool) == before and same_slabs(raw_slabs(pool), slabs), message
        pool.check_integrity()
    keys, values = make_kv(2, seed=9)
    for layer in range(3):
        write_tokens_kv(pool, layer, slots, keys, values)
        for i, seq in enumerate((0, 1)):
            written[seq, layer].append((keys[i:i + 1], values[i:i + 1]))
    assert_gathers_match(pool, written)
    pool.check_integrity()


@pytest.mark.parametrize("design", DESIGNS)
def test_a_refused_first_write_creates_no_storage(tiny_pool, design):
    import mlx.core as mx

    pool = tiny_pool(design, num_layers=2, block_size=2)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 1)
    slots = pool.write_slots([0], [0], 1)
    keys, values = make_kv(1)
    for bad in ((keys.astype(mx.int32), values.astype(mx.int32)), (keys, values[:, :1])):
        before = full_state(pool)
        with pytest.raises(PoolError):
            write_tokens_kv(pool, 1, slots, *bad)
        assert not pool.storage.initialised and pool.storage.tensors() == [] and full_state(pool) == before
    write_tokens_kv(pool, 1, slots, keys, values)  # layer 1's first write gives every layer its storage
    assert pool.storage.initialised and all(pool.storage.keys[layer] for layer in range(2))
    assert mx.array_equal(pool.gather_visible(1, 0).keys[:, 0], keys[0]) and not mx.any(pool.gather_visible(0, 0).keys)
    pool.check_integrity()


@pytest.mark.parametrize("design", DESIGNS)
def test_fast_path_prepare_write_does_no_storage_work(tiny_pool, monkeypatch, design):
    pool, written = prefilled_pool(tiny_pool, design, 2, {0: 3})  # rows 0, 1
    calls = []
    for name in ("ensure_rows", "materialize", "copy_row"):
        real = getattr(pool.storage, name)
        monkeypatch.setattr(pool.storage, name,
                            lambda *args, _name=name, _real=real: calls.append((_name, *args)) or _real(*args))
    counters, slabs = pool.counters(), raw_slabs(pool)
    pool.prepare_write(0, 3, 1)  # inside block 1, owned alone in every layer
    assert calls == [] and pool.counters() == counters and same_slabs(raw_slabs(pool), slabs)
    pool.clone(0, 1, 4)
    pool.prepare_write(1, 3, 1)  # block 1 now shared: copy-on-write to row 2
    # slab: row 2 needs a second 2-row slab in each layer; monolithic: its 32-row chunk holds it (no growth)
    growth = [("ensure_rows", 0, 4), ("ensure_rows", 1, 4), ("materialize",)] if design == "slab" else []
    assert [call[:4] for call in calls] == growth + [("copy_row", 0, 1, 2), ("copy_row", 1, 1, 2)]
    slots = pool.write_slots([0, 1], [3, 3], 1)
    assert slots.rows == ((1,), (2,))
    keys, values = make_kv(2, seed=5)
    for layer in range(2):
        write_tokens_kv(pool, layer, slots, keys, values)
        written[1, layer] = [written[0, layer][0], (keys[1:], values[1:])]
        written[0, layer].append((keys[:1], values[:1]))
    assert_gathers_match(pool, written)
    pool.check_integrity()


def test_write_geometry_remembers_valid_shapes_only():
    """``storage_base.write_geometry`` (every write's memoised check): after the shapes were seen valid, the same
    shapes for another batch or token count, a V of another dtype or shape, or something that is not an array are
    still refused, and an invalid call is never remembered."""
    import mlx.core as mx

    from pool.storage_base import write_geometry

    keys, values = (t[None] for t in make_kv(3))
    assert write_geometry(keys, values, 1, 3) == pool_geometry()
    assert write_geometry(keys, values, 1, 3) is write_geometry(keys, values, 1, 3)  # remembered
    for call, message in [
        (lambda: write_geometry(keys, values, 1, 2), "must both be \\[1, 2,"),
        (lambda: write_geometry(keys, values, 2, 3), "must both be \\[2, 3,"),
        (lambda: write_geometry(keys, values.astype(mx.float16), 1, 3), "dtype must match"),
        (lambda: write_geometry(keys, values[:, :, :1], 1, 3), "must both be"),
        (lambda: write_geometry(keys.tolist(), values, 1, 3), "must be mx.array"),
    ]:
        for _ in range(2):  # twice: a refused call must not have been remembered
            with pytest.raises(PoolError, match=message):
                call()


def pool_geometry():
    from pool import LayerGeometry

    return LayerGeometry("float32", 2, 4)
