"""One new token per sequence: token slots (plain Python, no mlx), ``write_tokens`` (one scatter per slab touched)
against ``write_batch`` byte for byte, stale slots refused, and ``prepare_write``'s decode fast path.

The bookkeeping tests use :class:`BlockBook` alone and never import mlx (the subprocess test proves the modules they
use stay mlx-free); the storage tests import mlx inside the test functions.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pool import BlockBook, PoolError, WritePlan, apply_op
from pool.ops import CopyOnWrite, PrepareWrite, RowMint, SlabAppend
from pool.token_slots import TokenSlots, check_current, resolve_token_slots

from pool_helpers import full_state, make_kv

ROOT = Path(__file__).resolve().parents[2]
DESIGNS = ["slab", "monolithic"]


# ---- bookkeeping (no mlx) ------------------------------------------------------------------------------------------
def book(num_layers=2, block_size=4, slab_blocks=2):
    return BlockBook(num_layers, block_size, "slab", slab_blocks, None, bytes_per_row=100)


def book_state(b, with_lengths=True):
    """Everything the bookkeeping holds (compared before/after a call that must read only)."""
    tables = {seq: [(t.block_ids[:], t.rows[:], t.length if with_lengths else None, t.logical_start)
                    for t in layer_tables] for seq, layer_tables in b.seqs.items()}
    rows = [(r.row_block[:], r.row_refcount[:], r.free.sorted_rows(), r.capacity) for r in b.layers]
    return tables, rows, b.counters.to_dict(), list(b.versions), sorted(b.loose), sorted(b.blocks.items())


def test_token_slots_name_each_layers_row_and_the_offset():
    b = book()
    b.acquire_block(1)  # a loose block takes layer 1's row 0: from here on the layers' rows differ
    b.add_sequence(3)
    b.prepare_write(3, 0, 6)  # rows: layer 0 [0, 1], layer 1 [1, 2]
    b.add_sequence(7)
    b.prepare_write(7, 0, 4)  # rows: layer 0 [2], layer 1 [3]
    b.prepare_write(3, 6, 1)  # inside block 1
    b.prepare_write(7, 4, 1)  # a new block: layer 0 row 3, layer 1 row 4
    assert [t.rows for t in b.tables(3)] == [[0, 1], [1, 2]] and [t.rows for t in b.tables(7)] == [[2, 3], [3, 4]]
    before = book_state(b)
    slots = resolve_token_slots(b, [7, 3], (p for p in (4, 6)))
    assert slots == TokenSlots(seq_ids=(7, 3), positions=(4, 6), offsets=(0, 2), layer_rows=((3, 1), (4, 2)),
                               layer_versions=tuple(b.versions))
    assert book_state(b) == before
    for layer in range(2):
        check_current(b, slots, layer)
    b.check_integrity()


def test_token_slots_bad_input_raises_and_changes_nothing():
    b = book()
    b.add_sequence(1)
    b.prepare_write(1, 0, 10)  # blocks 0..2
    b.clone(1, 2, 10)  # every block shared
    b.add_sequence(3)
    b.prepare_write(3, 0, 2)
    cases = [
        (([1], [10]), "sequence 1: position 10 is not prepared \\(length 10\\)"),
        (([3, 1], [1, -1]), "sequence 1: position -1 is not prepared"),
        (([2], [9]), "layer 0: the target blocks of sequences \\[2\\] are shared"),
        (([3, 2, 1], [1, 9, 0]), "sequences \\[2, 1\\] are shared"),
        (([1, 1], [9, 9]), "a sequence appears twice in \\[1, 1\\]"),
        (([], []), "at least one sequence"),
        (([1], [9, 8]), "one position per sequence"),
        (([42], [0]), "unknown sequence 42"),
    ]
    for (seq_ids, positions), message in cases:
        before = book_state(b)
        with pytest.raises(PoolError, match=message):
            resolve_token_slots(b, seq_ids, positions)
        assert book_state(b) == before, message
    b.check_integrity()


def test_check_current_refuses_slots_after_release_or_copy_on_write():
    b = book()
    for seq, tokens in ((1, 5), (2, 3)):
        b.add_sequence(seq)
        b.prepare_write(seq, 0, tokens)
    slots = resolve_token_slots(b, [1, 2], [4, 2])
    b.prepare_write(2, 3, 1)  # inside an owned block: lengths only, the rows (and the slots) stay current
    for layer in range(2):
        check_current(b, slots, layer)
    b.release(2)
    b.add_sequence(2)
    b.prepare_write(2, 0, 3)  # takes back its old row
    assert [t.rows for t in b.tables(2)] == [[2], [2]]
    for layer in range(2):
        with pytest.raises(PoolError, match=f"layer {layer}: token slots are stale"):
            check_current(b, slots, layer)
    fresh = resolve_token_slots(b, [1, 2], [4, 2])
    b.clone(1, 5, 5)
    b.prepare_write(1, 4, 1)  # block 1 shared -> copied on write: sequence 1 moves to a new row
    assert [t.rows for t in b.tables(1)] == [[0, 3], [0, 3]] and fresh.layer_rows[0][0] == 1
    for layer in range(2):
        with pytest.raises(PoolError, match="stale"):
            check_current(b, fresh, layer)
    assert resolve_token_slots(b, [1], [4]).layer_rows == ((3,), (3,))
    b.check_integrity()


def test_prepare_write_inside_owned_blocks_moves_only_lengths():
    b = book()
    ops = []
    b.add_op_listener(ops.append)
    b.add_sequence(1)
    b.prepare_write(1, 0, 5)  # blocks 0, 1 on rows 0, 1; capacity one slab (2 rows)
    before, replay_from = book_state(b, with_lengths=False), len(ops)
    assert b.prepare_write(1, 5, 3) == WritePlan(cow_pairs=[[], []], growth=[])  # tokens 5..7: inside block 1
    assert b.prepare_write(1, 0, 2) == WritePlan(cow_pairs=[[], []], growth=[])  # rewrite inside block 0
    assert ops[replay_from:] == [PrepareWrite(seq=1, start=5, num_tokens=3), PrepareWrite(seq=1, start=0, num_tokens=2)]
    assert book_state(b, with_lengths=False) == before  # no row minted, no version bumped, no capacity
    assert [t.length for t in b.tables(1)] == [8, 8]
    del ops[:]
    plan = b.prepare_write(1, 8, 1)  # block 2 does not exist yet: the full path
    assert plan == WritePlan(cow_pairs=[[], []], growth=[(0, 2, 4), (1, 2, 4)])
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
    assert plan == WritePlan(cow_pairs=[[(1, 2)], [(1, 2)]], growth=[(0, 2, 4), (1, 2, 4)])
    assert book_state(b) != before and CopyOnWrite(seq=2, logical_block=1, num_layers=2) in ops
    assert [t.rows for t in b.tables(2)] == [[0, 2], [0, 2]] and [t.rows for t in b.tables(1)] == [[0, 1], [0, 1]]
    assert [b.layers[0].row_refcount[row] for row in (0, 1, 2)] == [2, 1, 1]
    versions = list(b.versions)
    assert b.prepare_write(2, 7, 1) == WritePlan([[], []], [])  # its block 1 is its own now
    assert b.prepare_write(1, 6, 1) == WritePlan([[], []], [])  # and so is sequence 1's (block 0 is not in span)
    assert b.versions == versions
    with pytest.raises(PoolError, match="shared"):
        resolve_token_slots(b, [1], [0])  # block 0 is still shared
    replay, handles = book(), {}
    for op in ops:
        apply_op(replay, op, handles)
    assert book_state(replay)[:2] == book_state(b)[:2]
    b.check_integrity()


def test_token_slots_and_fast_path_run_without_mlx():
    code = ("import sys\n"
            "from pool import BlockBook\n"
            "from pool.token_slots import check_current, resolve_token_slots\n"
            "b = BlockBook(2, 4, 'slab', 2)\n"
            "b.add_sequence(0); b.prepare_write(0, 0, 3); plan = b.prepare_write(0, 3, 1)\n"
            "slots = resolve_token_slots(b, [0], [3]); check_current(b, slots, 1)\n"
            "print(plan.growth, slots.layer_rows, any(m == 'mlx' or m.startswith('mlx.') for m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[] ((0,), (0,)) False"


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
            pool.write(layer, seq, 0, keys, values)
            written[seq, layer] = [(keys, values)]
    return pool, written


def raw_slabs(pool):
    """New, evaluated references to every layer's K and V tensors: a later store replaces the pool's, not these."""
    import mlx.core as mx

    slabs = [[mx.array(t) for t in tensors] for layer in range(pool.config.num_layers) if pool.storage.has_layer(layer)
             for tensors in (pool.storage.keys[layer], pool.storage.values[layer])]
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
        unwritten = pool.seq_length(seq) - sum(k.shape[0] for k, _ in chunks)
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
def test_write_tokens_stores_the_bytes_of_one_token_write_batch(tiny_pool, monkeypatch, design, scenario):
    slab_blocks, lengths, order = SCENARIOS[scenario]
    batch_pool, written = prefilled_pool(tiny_pool, design, slab_blocks, lengths)
    token_pool, _ = prefilled_pool(tiny_pool, design, slab_blocks, lengths)
    built = []
    build = token_pool.storage._token_groups
    monkeypatch.setattr(token_pool.storage, "_token_groups", lambda rows, offsets: built.append(rows) or build(
        rows, offsets))
    for step in range(3):  # later steps cross into new blocks (and, for the slab design, new slabs)
        positions = [token_pool.seq_length(seq) for seq in order]
        for pool in (batch_pool, token_pool):
            for seq, position in zip(order, positions):
                pool.prepare_write(seq, position, 1)
        slots = token_pool.token_slots(order, positions)
        indices = {}
        for layer in range(2):
            keys, values = make_kv(len(order), seed=100 + 10 * step + layer)
            batch_pool.write_batch(layer, order, positions, keys[:, None], values[:, None])
            token_pool.write_tokens(layer, slots, keys, values, indices)
            for i, seq in enumerate(order):
                written[seq, layer].append((keys[i:i + 1], values[i:i + 1]))
        assert slots.layer_rows[0] == slots.layer_rows[1] and list(indices) == [(slots.layer_rows[0], slots.offsets)]
        assert len(built) == step + 1  # the second layer reused the first layer's index arrays
        groups = indices[slots.layer_rows[0], slots.offsets]
        touched = {token_pool.storage._slab_for_row(row)[0] for row in slots.layer_rows[0]}
        assert len(groups) == len(touched) and {group[0] for group in groups} == touched
        if step == 0:
            assert describe(groups) == FIRST_STEP_GROUPS[design, scenario]
        assert same_slabs(raw_slabs(token_pool), raw_slabs(batch_pool))
        assert_gathers_match(token_pool, written)
    token_pool.check_integrity()


def _change_rows_after_resolving(pool, written, change):
    """Make slots resolved for sequences 0 and 1 at position 3 stale. Returns the positions to resolve afresh."""
    if change == "release_and_re_add":
        pool.release(1)
        pool.add_sequence(1)
        pool.prepare_write(1, 0, 4)  # takes back rows 2, 3: the stale slots point into its new tokens
        assert pool.book.tables(1)[0].rows == [2, 3]
        for layer in range(2):
            keys, values = make_kv(4, seed=50 + layer)
            pool.write(layer, 1, 0, keys, values)
            written[1, layer] = [(keys, values)]
        pool.prepare_write(1, 4, 1)
        return [3, 4]
    pool.clone(0, 5, 4)  # shares sequence 0's blocks, including the target block (row 1) and its position 3
    pool.prepare_write(0, 3, 1)  # copy-on-write: sequence 0's target block moves to a new row
    assert pool.book.tables(0)[0].rows == [0, 4] and pool.book.tables(5)[0].rows == [0, 1]
    for layer in range(2):
        written[5, layer] = [written[0, layer][0]]  # position 3: never written (zeros)
    return [3, 3]


@pytest.mark.parametrize("change", ["release_and_re_add", "copy_on_write"])
@pytest.mark.parametrize("design", DESIGNS)
def test_stale_token_slots_raise_and_write_nothing(tiny_pool, design, change):
    pool, written = prefilled_pool(tiny_pool, design, 2, {0: 3, 1: 3})
    for seq in (0, 1):
        pool.prepare_write(seq, 3, 1)
    slots = pool.token_slots([0, 1], [3, 3])
    positions = _change_rows_after_resolving(pool, written, change)
    keys, values = make_kv(2, seed=77)
    for layer in range(2):
        before, slabs = full_state(pool), raw_slabs(pool)
        with pytest.raises(PoolError, match=f"layer {layer}: token slots are stale"):
            pool.write_tokens(layer, slots, keys, values)
        assert same_slabs(raw_slabs(pool), slabs) and full_state(pool) == before
        pool.check_integrity()
    assert_gathers_match(pool, written)  # the re-added / cloned sequence kept its tokens
    fresh = pool.token_slots([0, 1], positions)
    for layer in range(2):
        pool.write_tokens(layer, fresh, keys, values)
        for i, seq in enumerate((0, 1)):
            written[seq, layer].append((keys[i:i + 1], values[i:i + 1]))
    assert_gathers_match(pool, written)
    pool.check_integrity()


def _bad_token_writes(pool, slots):
    import mlx.core as mx
    import numpy as np

    keys, values = make_kv(2, seed=9)
    return [
        (lambda: pool.write_tokens(0, slots, keys[:1], values[:1]), "hold 1 tokens; expected 2"),
        (lambda: pool.write_tokens(0, slots, *make_kv(3)), "hold 3 tokens; expected 2"),
        (lambda: pool.write_tokens(0, slots, keys.astype(mx.float16), values.astype(mx.float16)),
         "layer 0 stores float32 .* got float16"),
        (lambda: pool.write_tokens(1, slots, *make_kv(2, n_kv_heads=3)), "n_kv_heads=2.*got float32 \\[n_kv_heads=3"),
        (lambda: pool.write_tokens(0, slots, *make_kv(2, head_dim=8)), "head_dim=4\\]; got .*head_dim=8"),
        (lambda: pool.write_tokens(0, slots, keys, values[:, :1]), "must both be"),
        (lambda: pool.write_tokens(0, slots, keys[:, None], values[:, None]), "must both be"),
        (lambda: pool.write_tokens(0, slots, keys.astype(mx.int32), values.astype(mx.int32)), "dtype must"),
        (lambda: pool.write_tokens(0, slots, np.zeros((2, 2, 4)), values), "must be mx.array"),
        (lambda: pool.write_tokens(3, slots, keys, values), "layer 3 out of range"),
        (lambda: pool.write_tokens(2, slots, keys[:1], values[:1]), "hold 1 tokens; expected 2"),
    ]


@pytest.mark.parametrize("design", DESIGNS)
def test_write_tokens_bad_input_raises_and_changes_nothing(tiny_pool, design):
    import mlx.core as mx

    pool, written = prefilled_pool(tiny_pool, design, 2, {0: 3, 1: 3}, num_layers=3, written_layers=2)
    assert not pool.storage.has_layer(2)  # layer 2: prepared, never written
    for seq in (0, 1):
        pool.prepare_write(seq, 3, 1)
    slots = pool.token_slots([0, 1], [3, 3])
    for call, message in _bad_token_writes(pool, slots):
        before, slabs = full_state(pool), raw_slabs(pool)
        with pytest.raises(PoolError, match=message):
            call()
        assert full_state(pool) == before and same_slabs(raw_slabs(pool), slabs), message
        assert not pool.storage.has_layer(2), message  # a refused first write creates no storage
        pool.check_integrity()
    keys, values = make_kv(2, seed=9)
    for layer in range(3):
        pool.write_tokens(layer, slots, keys, values)
    for layer in range(2):
        for i, seq in enumerate((0, 1)):
            written[seq, layer].append((keys[i:i + 1], values[i:i + 1]))
    assert_gathers_match(pool, written)
    tail = pool.gather_visible(2, 1)  # layer 2's first write: the token, after zeros
    assert mx.array_equal(tail.keys[:, 3], keys[1]) and not mx.any(tail.keys[:, :3]).item()
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
    slots = pool.token_slots([0, 1], [3, 3])
    assert slots.layer_rows == ((1, 2), (1, 2))
    keys, values = make_kv(2, seed=5)
    for layer in range(2):
        pool.write_tokens(layer, slots, keys, values)
        written[1, layer] = [written[0, layer][0], (keys[1:], values[1:])]
        written[0, layer].append((keys[:1], values[:1]))
    assert_gathers_match(pool, written)
    pool.check_integrity()


def test_token_geometry_is_geometry_of_and_a_memo_of_valid_shapes_only():
    """``storage_base.token_geometry`` (the decode write's memoised check) answers exactly as ``geometry_of``: after
    the shapes were seen valid, the same shapes with another token count, a V of another dtype or shape, or
    something that is not an array are still refused, and an invalid call is never remembered."""
    import mlx.core as mx

    from pool.storage_base import geometry_of, token_geometry

    keys, values = make_kv(3)
    assert token_geometry(keys, values, 3) == geometry_of(keys, values, tokens=3)
    assert token_geometry(keys, values, 3) is token_geometry(keys, values, 3)  # remembered
    for call, message in [
        (lambda: token_geometry(keys, values, 2), "hold 3 tokens; expected 2"),
        (lambda: token_geometry(keys, values.astype(mx.float16), 3), "dtype must match"),
        (lambda: token_geometry(keys, values[:, :1], 3), "must both be"),
        (lambda: token_geometry(keys.tolist(), values, 3), "must be mx.array"),
    ]:
        for _ in range(2):  # twice: a refused call must not have been remembered
            with pytest.raises(PoolError, match=message):
                call()
