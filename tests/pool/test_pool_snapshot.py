"""Snapshot schema (docs/contracts.md), row owners/refcounts, fragmentation figures and op listener payloads."""

from __future__ import annotations

import msgspec
from pool_helpers import make_kv

from pool import AnyOp, Owner, PoolSnapshot, PoolStats, RowState, row_state
from pool.ops import Copied, CopyOnWrite, RowMint, RowsFreed, SlabAppend, StorageInit
from pool_writes import write_kv

TOP_KEYS = ("design", "block_size", "slab_blocks", "num_layers", "dtype", "n_kv_heads", "head_dim", "bytes_per_row",
            "stats", "counters", "layers", "seq_rows", "row_owner", "row_refcount")
STATS_KEYS = ("allocated_blocks", "live_blocks", "free_blocks", "bytes_reserved", "bytes_in_use", "num_sequences",
              "num_handles")
COUNTER_KEYS = ("slab_appends", "grow_events", "bytes_copied", "bytes_copied_model", "cow_bytes_copied",
                "cow_bytes_copied_model", "cow_copies", "rows_minted", "rows_reused",
                "gathers", "gather_runs_total", "fused_decisions", "gather_decisions", "slab_releases",
                "bytes_released", "blocks_moved", "bytes_moved", "bytes_moved_model", "prefill_bytes_gathered",
                "decode_bytes_gathered", "prefill_bytes_gathered_model", "decode_bytes_gathered_model",
                "prefill_paged_decisions", "prefill_gather_decisions")
LAYER_KEYS = ("num_chunks", "capacity_rows", "free_rows", "holes", "largest_free_run", "fragmentation",
              "gather_runs_hist", "fused")


def fill(pool, seq, tokens, seed=0):
    keys, values = make_kv(tokens, seed=seed)
    pool.prepare_write(seq, 0, tokens)
    for layer in range(pool.config.num_layers):
        write_kv(pool, layer, seq, 0, keys, values)


def test_empty_pool_snapshot_schema(tiny_pool):
    snap = tiny_pool("slab").snapshot()
    assert isinstance(snap, PoolSnapshot) and snap.__struct_fields__ == TOP_KEYS
    assert snap.stats.__struct_fields__ == STATS_KEYS and snap.counters.__struct_fields__ == COUNTER_KEYS
    assert snap.dtype is None and snap.bytes_per_row == 0
    assert [layer.__struct_fields__ for layer in snap.layers] == [LAYER_KEYS, LAYER_KEYS]
    assert snap.layers[0].capacity_rows == 0 and snap.layers[0].fragmentation == 0.0
    assert snap.row_owner == [] and snap.row_refcount == [] and snap.seq_rows == {}


def test_snapshot_owners_refcounts_and_fragmentation(tiny_pool):
    pool = tiny_pool("slab", num_layers=2, block_size=4, slab_blocks=4)
    for seq in range(4):
        pool.add_sequence(seq)
        fill(pool, seq, 8, seed=seq)  # rows [0,1] [2,3] [4,5] [6,7]
    pool.clone(3, 9, 8)               # rows 6,7 shared by 3 and 9
    handle = pool.detach(1)           # rows 2,3 held only by the handle
    pool.release(0)                   # rows 0,1 free
    pool.release(2)                   # rows 4,5 free
    pool.gather_visible(0, 3)
    snap = pool.snapshot()
    layer = snap.layers[0]
    assert layer.num_chunks == 2 and layer.capacity_rows == 8
    assert snap.row_owner == [-1, -1, -2, -2, -1, -1, 3, 3]  # once: every layer holds these rows
    assert snap.row_refcount == [0, 0, 1, 1, 0, 0, 2, 2]
    assert snap.layers[1].capacity_rows == 8 and snap.layers[1].fragmentation == 0.5
    assert [row_state(o, r) for o, r in zip(snap.row_owner, snap.row_refcount)][1:4] == [
        RowState.FREE, RowState.HANDLE, RowState.HANDLE]
    assert (layer.free_rows, layer.holes, layer.largest_free_run) == (4, 2, 2)
    assert layer.fragmentation == 0.5
    assert layer.gather_runs_hist == {1: 1} and snap.layers[1].gather_runs_hist == {}
    assert snap.seq_rows == {3: [6, 7], 9: [6, 7]}
    assert snap.stats == PoolStats(allocated_blocks=16, live_blocks=8, free_blocks=8, bytes_reserved=2 * 8 * 256,
                                   bytes_in_use=8 * 256, num_sequences=2, num_handles=1)
    assert snap.bytes_per_row == 256 and snap.dtype == "float32"
    assert msgspec.json.decode(msgspec.json.encode(snap), type=PoolSnapshot) == snap  # plain data, round trip
    summary = snap.summary()
    assert summary.seq_rows is None and summary.row_owner is None and summary.row_refcount is None
    assert summary.stats == snap.stats and summary.layers == snap.layers
    pool.release_handle(handle)
    assert pool.snapshot().row_owner == [-1, -1, -1, -1, -1, -1, 3, 3]


def test_row_state_reads_every_negative_owner_but_free_as_held():
    """Older recordings may hold -3 (a block a caller restored, a path that is gone): held, not a sequence's."""
    assert row_state(Owner.FREE, 0) == RowState.FREE and row_state(Owner.HANDLE, 1) == RowState.HANDLE
    assert row_state(-3, 1) == RowState.HANDLE
    assert row_state(4, 2) == RowState.SHARED and row_state(4, 1) == RowState.LIVE


def test_op_listener_emits_contract_ops(tiny_pool):
    pool = tiny_pool("slab", num_layers=2, block_size=4, slab_blocks=2)
    ops = []
    pool.add_op_listener(ops.append)
    pool.add_sequence(0)
    fill(pool, 0, 10)
    pool.clone(0, 1, 10)
    pool.prepare_write(1, 10, 1)
    pool.release(0)
    names = [op.name for op in ops]
    assert names == ["add_sequence", "row_mint", "slab_append", "prepare_write", "storage_init", "clone", "cow",
                     "row_mint", "prepare_write", "copied", "rows_freed", "release"]  # the first write: one init
    assert ops[1] == RowMint(layer_count=2, rows=[0, 1, 2], minted=6, reused=0)
    assert ops[2] == SlabAppend(layers=2, count=4, bytes=0)  # geometry unknown before 1st write
    assert ops[4] == StorageInit(dtype="float32", n_kv_heads=2, head_dim=4, bytes_per_row=256)
    assert ops[6] == CopyOnWrite(seq=1, logical_block=2, num_layers=2)
    # measured by the allocator: one row's K and V staged per layer (2 layers x 256 bytes)
    assert ops[9] == Copied(bytes=0, cow_bytes=2 * 256)
    assert ops[10] == RowsFreed(rows=[2], count=2)
    encoded = msgspec.json.encode(ops)
    assert encoded.startswith(b'[{"op":"add_sequence","seq":0}')  # the op log's wire shape (docs/contracts.md)
    assert b'{"op":"copied","bytes":0,"cow_bytes":512}' in encoded
    assert msgspec.json.decode(encoded, type=list[AnyOp]) == ops


def test_snapshot_free_figures_count_the_unminted_tail_of_the_reserved_capacity(tiny_pool):
    """Two 4-row slabs, rows 0-4 minted, rows 5-7 reserved but never minted: free too. Freed rows apart from the
    tail are a hole of their own; freed rows that touch it join it into one run."""
    pool = tiny_pool("slab", num_layers=2, block_size=4, slab_blocks=4)
    for seq, tokens in enumerate((8, 4, 8)):  # rows [0, 1], [2], [3, 4]
        pool.add_sequence(seq)
        fill(pool, seq, tokens, seed=seq)
    snap = pool.snapshot()
    layer = snap.layers[0]
    assert layer.capacity_rows == 8 and snap.row_owner == [0, 0, 1, 2, 2, -1, -1, -1]
    assert (layer.free_rows, layer.holes, layer.largest_free_run, layer.fragmentation) == (3, 1, 3, 0.0)
    pool.release(0)  # rows 0-1 free: a hole apart from the tail
    layer = pool.snapshot().layers[1]
    assert (layer.free_rows, layer.holes, layer.largest_free_run) == (5, 2, 3)
    assert layer.fragmentation == 1 - 3 / 5
    pool.release(2)  # rows 3-4 free: they join the tail, one run of 5
    layer = pool.snapshot().layers[0]
    assert (layer.free_rows, layer.holes, layer.largest_free_run) == (7, 2, 5)
    assert layer.fragmentation == 1 - 5 / 7
