"""Storage layout: slabs stay their own row-contiguous buffers (whole-tensor stores go through ``store_rows``), slab
appends are evaluated once per operation (``materialize``), and gathers return row-contiguous [H, tokens, D] copies
equal to what was written.

Contiguity is read on CPU through numpy's view of the evaluated array (``C_CONTIGUOUS``): MLX's ``__setitem__`` that
covers a whole array makes the array the assigned value itself, so a slab written in full from a transposed view
would otherwise become that strided view.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from pool import PagedKVPool, PoolConfig
from pool.storage_base import LayerGeometry, store_rows
from pool.storage_monolithic import MonolithicStorage
from pool.storage_slab import SlabStorage

from pool_helpers import make_kv
from pool_writes import write_kv

DESIGNS = ["slab", "monolithic"]
GEOMETRY = LayerGeometry("float32", 2, 4)


def is_row_contiguous(array) -> bool:
    mx.eval(array)
    return bool(np.asarray(array).flags["C_CONTIGUOUS"])


def transposed_kv(num_tokens, n_kv_heads=2, head_dim=4, seed=0):
    """K and V [num_tokens, H, D] as strided views of [H, num_tokens, D] tensors (a model's K/V output layout)."""
    keys, values = make_kv(num_tokens, n_kv_heads, head_dim, seed=seed)
    heads_first = [mx.contiguous(t.transpose(1, 0, 2)) for t in (keys, values)]
    mx.eval(heads_first)
    views = [t.transpose(1, 0, 2) for t in heads_first]
    assert not is_row_contiguous(views[0]) and mx.array_equal(views[0], keys)
    return views[0], views[1]


def all_slabs(pool):
    return pool.storage.tensors()


def write_row(storage, row, keys, values):
    """Overwrite one whole row of layer 0 (what a test needs to fill storage it built by hand) with ``keys``/
    ``values`` given token-major ([block, H, D]), stored head-major."""
    slab, local = storage._slab_for_row(row)
    store_rows(storage.keys[0], slab, local, keys.transpose(1, 0, 2)[None])
    store_rows(storage.values[0], slab, local, values.transpose(1, 0, 2)[None])


def gather_ref(chunks, logical_start=0):
    """[H, tokens, D] of the written chunks' tokens from ``logical_start`` on."""
    return mx.concatenate(chunks)[logical_start:].transpose(1, 0, 2)


# ---- store_rows: whole-tensor writes ---------------------------------------------------------------------------
def test_store_rows_whole_tensor_write_keeps_its_own_contiguous_buffer():
    tensors = [mx.zeros((2, 2, 2, 4)), mx.zeros((3, 2, 2, 4))]  # [rows, H, block_size, D]
    source = mx.random.normal((2, 2, 2, 4), key=mx.random.key(1))  # [rows, block_size, H, D]
    view = source.transpose(0, 2, 1, 3)
    assert not is_row_contiguous(view)
    store_rows(tensors, 0, 0, view)  # covers tensor 0 entirely
    store_rows(tensors, 1, 1, view)  # rows 1..2 of tensor 1
    assert tensors[0].shape == (2, 2, 2, 4) and is_row_contiguous(tensors[0])
    assert mx.array_equal(tensors[0], view)
    assert is_row_contiguous(tensors[1]) and mx.array_equal(tensors[1][1:], view)
    assert not mx.any(tensors[1][0]).item()


@pytest.mark.parametrize("design", DESIGNS)
def test_full_slab_span_from_a_transposed_view_keeps_every_slab_contiguous(tiny_pool, design):
    # slab: 2-row slabs of 2 tokens, 11 tokens = slabs 0 and 1 written whole, slab 2 in part;
    # monolithic: 64 tokens = its whole 32-row tensor in one span
    num_tokens = 11 if design == "slab" else 64
    pool = tiny_pool(design, num_layers=2, block_size=2, slab_blocks=2)
    keys, values = transposed_kv(num_tokens, seed=3)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, num_tokens)
    for layer in range(2):
        write_kv(pool, layer, 0, 0, keys, values)
    slabs = all_slabs(pool)
    assert len(slabs) == (12 if design == "slab" else 4)
    assert all(is_row_contiguous(slab) for slab in slabs)
    for layer in range(2):
        got = pool.gather_visible(layer, 0)
        assert mx.array_equal(got.keys, gather_ref([keys])) and mx.array_equal(got.values, gather_ref([values]))
    pool.check_integrity()


@pytest.mark.parametrize("design", DESIGNS)
def test_copy_on_write_into_a_one_block_slab_keeps_both_rows(tiny_pool, design):
    pool = tiny_pool(design, num_layers=2, block_size=2, slab_blocks=1)
    keys, values = transposed_kv(3, seed=4)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 3)
    for layer in range(2):
        write_kv(pool, layer, 0, 0, keys, values)  # row 0 whole (its slab), row 1 in part
    pool.clone(0, 1, 3)
    pool.prepare_write(1, 3, 1)  # block 1 shared: copied to row 2 (a slab of its own)
    assert pool.book.table(1).rows == [0, 2] and pool.counters().cow_copies == 2
    new_k, new_v = make_kv(1, seed=5)
    for layer in range(2):
        write_kv(pool, layer, 1, 3, new_k, new_v)
    assert all(is_row_contiguous(slab) for slab in all_slabs(pool))
    for layer in range(2):
        original, copy = pool.gather_visible(layer, 0), pool.gather_visible(layer, 1)
        assert mx.array_equal(original.keys, gather_ref([keys])) and mx.array_equal(original.values,
                                                                                    gather_ref([values]))
        assert mx.array_equal(copy.keys, gather_ref([keys, new_k])) and mx.array_equal(copy.values,
                                                                                       gather_ref([values, new_v]))
    pool.check_integrity()


# ---- materialize: slab appends evaluated once per operation ----------------------------------------------------
@pytest.fixture
def eval_calls(monkeypatch):
    """The arguments of every evaluation call (``mx.eval`` or ``mx.async_eval``: materialize may start the work
    without waiting for it), in order; the calls still run."""
    calls = []
    for name in ("eval", "async_eval"):
        real = getattr(mx, name)
        monkeypatch.setattr(mx, name, lambda *args, _real=real: calls.append(args) or _real(*args))
    return calls


def test_slab_appends_wait_for_one_materialize(eval_calls):
    storage = SlabStorage(num_layers=2, block_size=2, slab_blocks=2)
    storage.init(GEOMETRY)
    reports = []
    storage.after_alloc = lambda: reports.append(len(storage._unevaluated))
    storage.ensure_rows(0, 6)  # 3 slabs
    storage.ensure_rows(1, 4)  # 2 slabs
    storage.ensure_rows(1, 3)  # already there
    assert eval_calls == [] and reports == []
    appended = [t for layer in range(2) for pair in zip(storage.keys[layer], storage.values[layer]) for t in pair]
    assert len(storage._unevaluated) == 10 and all(a is b for a, b in zip(storage._unevaluated, appended))
    assert storage.slab_appends == 5 and [storage.layer_capacity(layer) for layer in range(2)] == [6, 4]
    storage.materialize()
    assert len(eval_calls) == 1 and all(a is b for a, b in zip(eval_calls[0][0], appended))
    assert reports == [0] and storage._unevaluated == []  # reported once, after the pending list was emptied
    storage.materialize()  # nothing pending: no eval, no report
    assert len(eval_calls) == 1 and reports == [0]
    assert all(t.shape == (2, 2, 2, 4) and not mx.any(t).item() for t in appended)


def test_monolithic_allocates_eagerly_and_leaves_nothing_pending(eval_calls):
    storage = MonolithicStorage(num_layers=1, block_size=2, slab_blocks=2)
    storage.init(GEOMETRY)
    reports = []
    storage.after_alloc = lambda: reports.append(storage.capacity_rows())
    storage.ensure_rows(0, 32)
    assert len(eval_calls) == 2 and reports == [32, 32] and storage._unevaluated == []  # K, then V
    storage.materialize()
    assert len(eval_calls) == 2 and reports == [32, 32]


def growth_evals(calls) -> list[tuple]:
    """The evaluations of one measured growth, in order: ("sync", tensors the copy meter settled) for its two
    synchronisations (window open, checkpoint), ("new", tensors) for the one asynchronous evaluation of the new
    slabs."""
    return [("new" if asynchronous else "sync", len(args[0])) for asynchronous, args in calls]


def test_pool_growth_evaluates_every_layers_slabs_in_one_eval(monkeypatch):
    pool = PagedKVPool(PoolConfig(num_layers=3, block_size=2, slab_blocks=2))
    kinds = []
    real_eval, real_async = mx.eval, mx.async_eval
    monkeypatch.setattr(mx, "eval", lambda *a: kinds.append((False, a)) or real_eval(*a))
    monkeypatch.setattr(mx, "async_eval", lambda *a: kinds.append((True, a)) or real_async(*a))
    reports = []
    pool.storage.after_alloc = lambda: reports.append(pool.storage.slab_appends)
    keys, values = make_kv(9, seed=6)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 4)  # rows 0, 1: one slab per layer, no storage yet
    assert kinds == [] and reports == []
    slots = pool.write_slots([0], [0], 4)
    for layer in range(3):  # the pool's first write gives every layer its slab, in one evaluation
        pool.write(layer, slots, keys[None, :4], values[None, :4])
    assert reports == [3]
    # nothing to settle before (no storage yet): the three layers' K/V slab pairs, then settled
    assert growth_evals(kinds) == [("new", 6), ("sync", 6)]
    del kinds[:]
    pool.prepare_write(0, 4, 3)  # rows 2, 3: a second slab in every layer
    assert reports == [3, 6] and pool.storage._unevaluated == []
    # one evaluation of all six new slabs, between the meter's two synchronisations of all 3 layers' storage
    assert growth_evals(kinds) == [("sync", 6), ("new", 6), ("sync", 12)]
    pool.prepare_write(0, 7, 1)  # inside block 3: nothing allocated
    assert reports == [3, 6] and len(kinds) == 3
    assert pool.counters().bytes_copied == 0
    for layer in range(3):
        write_kv(pool, layer, 0, 4, keys[4:8], values[4:8])
        assert mx.array_equal(pool.gather_visible(layer, 0).keys, gather_ref([keys[:8]]))
    pool.check_integrity()


# ---- gathers: row-contiguous copies --------------------------------------------------------------------------------
def interleaved_pool(design):
    """One layer, 2-token blocks, 4-row slabs. Sequences 0 and 1 alternate block by block (rows [0, 2, .., 10] and
    [1, 3, .., 11]: same-slab rows not consecutive, read by take), sequence 0 adds one token (row 12), sequence 2
    writes 10 tokens at once (rows 13..17: consecutive, read by slices). Returns the pool and {seq: [K]}, {seq: [V]}."""
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=2, slab_blocks=4, design=design))
    written_k, written_v = {0: [], 1: [], 2: []}, {0: [], 1: [], 2: []}

    def append(seq, num_tokens, seed):
        keys, values = make_kv(num_tokens, seed=seed)
        start = pool.step_view([seq]).lengths[0]
        pool.prepare_write(seq, start, num_tokens)
        write_kv(pool, 0, seq, start, keys, values)
        written_k[seq].append(keys)
        written_v[seq].append(values)

    for seq in (0, 1, 2):
        pool.add_sequence(seq)
    for step in range(6):
        for seq in (0, 1):
            append(seq, 2, 10 * step + seq)
    append(0, 1, 90)
    append(2, 10, 91)
    assert pool.book.table(0).rows == [0, 2, 4, 6, 8, 10, 12]
    assert pool.book.table(2).rows == [13, 14, 15, 16, 17]
    return pool, written_k, written_v


GATHER_CASES = [  # (seq, logical_start, tokens visible, runs for the slab design)
    (0, 0, 13, 4), (0, 3, 10, 4), (0, 9, 4, 2), (0, 12, 1, 1), (1, 1, 11, 3), (2, 0, 10, 2), (2, 5, 5, 2),
    (0, 13, 0, 1),  # empty range inside the last block: that block's run is still read
    (1, 12, 0, 0),  # empty range at a block boundary: nothing read
]


@pytest.mark.parametrize("design", DESIGNS)
def test_gather_visible_returns_contiguous_copies_of_the_written_tokens(design):
    pool, written_k, written_v = interleaved_pool(design)
    for seq, logical_start, visible, slab_runs in GATHER_CASES:
        pool.set_logical_start(seq, logical_start)
        got = pool.gather_visible(0, seq)
        case = (seq, logical_start)
        assert got.keys.shape == got.values.shape == (2, visible, 4), case
        assert mx.array_equal(got.keys, gather_ref(written_k[seq], logical_start)), case
        assert mx.array_equal(got.values, gather_ref(written_v[seq], logical_start)), case
        assert got.num_runs == (slab_runs if design == "slab" else min(slab_runs, 1)), case
        if visible > 1:
            assert is_row_contiguous(got.keys) and is_row_contiguous(got.values), case
    pool.check_integrity()


@pytest.mark.parametrize("design", DESIGNS)
def test_storage_gather_trims_runs_to_the_requested_tokens(design):
    storage = (SlabStorage if design == "slab" else MonolithicStorage)(num_layers=1, block_size=2, slab_blocks=4)
    storage.init(GEOMETRY)
    storage.grow(8)
    contents = {row: make_kv(2, seed=row) for row in range(8)}
    for row, (keys, values) in contents.items():
        write_row(storage, row, keys, values)
    rows = [6, 0, 2, 1, 5, 7]  # slab design runs: (1, [2]), (0, [0, 2, 1]) by take, (1, [1, 3]) by take
    flat_k = mx.concatenate([contents[row][0] for row in rows])
    flat_v = mx.concatenate([contents[row][1] for row in rows])
    for lo, hi in ((0, 12), (1, 11), (3, 8), (2, 4), (11, 12), (5, 5)):
        keys, values, runs = storage.gather(0, rows, lo, hi)
        assert runs == (3 if design == "slab" else 1), (lo, hi)
        assert keys.shape == (2, hi - lo, 4), (lo, hi)
        assert mx.array_equal(keys, flat_k[lo:hi].transpose(1, 0, 2)), (lo, hi)
        assert mx.array_equal(values, flat_v[lo:hi].transpose(1, 0, 2)), (lo, hi)
        if hi - lo > 1:
            assert is_row_contiguous(keys) and is_row_contiguous(values), (lo, hi)
