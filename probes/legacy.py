"""Pool records of formats v1 and v2, which hold a copy of the rows per layer, read through layer 0 (mlx-free).

Until format v3 the bookkeeping kept one block table, refcount list, free list and capacity per layer, and a
keyframe stored all of them: the full snapshot's row owners and refcounts in every layer, and the book state's row
arrays and tables in every layer. Layers always held the same rows (the only way they could diverge was a restore
path no workload used), so today's one-row-space records are those of layer 0. ``snapshot_from_layers`` and
``book_state_from_layers`` convert, and refuse (ValueError, which ``probes.codec`` reports as a malformed record) a
record whose layers do not mirror layer 0: one row space cannot hold it, and reading layer 0 alone would show a
pool that never was.

The ``*V2`` structs are the records' shapes as written then (format v2's msgpack; v1's JSON converts into them).
"""

from __future__ import annotations

import msgspec

from pool import BookState, FusedDecision, LayerGeometry, LayerSnapshot, PoolConfig, PoolCounters, PoolSnapshot, \
    PoolStats
from pool.book_state import STATE_VERSION, RowsState, TableState
from pool.stats import BookCounters


class LayerSnapshotV2(msgspec.Struct, frozen=True):
    num_chunks: int
    capacity_rows: int
    free_rows: int
    holes: int
    largest_free_run: int
    fragmentation: float
    gather_runs_hist: dict[int, int]
    fused: FusedDecision
    row_owner: list[int] | None = None
    row_refcount: list[int] | None = None


class PoolSnapshotV2(msgspec.Struct, frozen=True):
    design: str
    block_size: int
    slab_blocks: int
    num_layers: int
    dtype: str | None
    n_kv_heads: int | None
    head_dim: int | None
    bytes_per_row: int
    stats: PoolStats
    counters: PoolCounters
    layers: list[LayerSnapshotV2]
    seq_rows: dict[int, list[int]] | None = None


class LayerRowsStateV2(msgspec.Struct, frozen=True):
    row_block: list[int]
    row_refcount: list[int]
    free: list[int]
    capacity: int
    parked: list[int] = []


class BookConfigV2(PoolConfig, frozen=True):
    bytes_per_row: int = 0


class BookStateV2(msgspec.Struct, frozen=True):
    v: int
    config: BookConfigV2
    geometry: LayerGeometry | None
    layers: list[LayerRowsStateV2]
    seqs: list[tuple[int, list[TableState]]]
    handles: list[tuple[int, list[TableState]]]
    loose: list[int]
    counters: BookCounters
    next_block_id: int
    next_handle_id: int


class KeyframeRecordV2(msgspec.Struct, frozen=True):
    t: float
    step: int
    tokens: int
    op_index: int
    snapshot: PoolSnapshotV2
    book_state: BookStateV2 | None = None


def snapshot_from_layers(old: PoolSnapshotV2) -> PoolSnapshot:
    """A v1/v2 snapshot (full or summary) as today's: the per-layer figures kept, the row arrays once (layer 0's,
    checked against every other layer's). ValueError when a layer holds other rows."""
    first = old.layers[0] if old.layers else None
    owner = first.row_owner if first is not None else None
    refcount = first.row_refcount if first is not None else None
    for index, layer in enumerate(old.layers):
        if layer.row_owner != owner or layer.row_refcount != refcount or layer.capacity_rows != first.capacity_rows:
            raise ValueError(f"layer {index} of the snapshot holds other rows than layer 0 (one row space cannot "
                             "hold it)")
    layers = [LayerSnapshot(layer.num_chunks, layer.capacity_rows, layer.free_rows, layer.holes,
                            layer.largest_free_run, layer.fragmentation, layer.gather_runs_hist, layer.fused)
              for layer in old.layers]
    return PoolSnapshot(old.design, old.block_size, old.slab_blocks, old.num_layers, old.dtype, old.n_kv_heads,
                        old.head_dim, old.bytes_per_row, old.stats, old.counters, layers, old.seq_rows,
                        row_owner=owner, row_refcount=refcount)


def book_state_from_layers(old: BookStateV2) -> BookState:
    """A v1/v2 book state (one copy of the rows and tables per layer) as today's, through layer 0. ValueError when a
    layer differs from layer 0, when blocks were held by a caller (the restore path, gone), or when the state
    lists no layer."""
    cfg = old.config
    if len(old.layers) != cfg.num_layers or not old.layers:
        raise ValueError(f"book state lists {len(old.layers)} layers for num_layers={cfg.num_layers}")
    if old.loose:
        raise ValueError(f"book state holds {len(old.loose)} blocks restored by a caller, which one row space "
                         "does not keep")
    first = old.layers[0]
    for index, layer in enumerate(old.layers):
        if (layer.row_refcount, layer.free, layer.capacity, layer.parked) != (
                first.row_refcount, first.free, first.capacity, first.parked):
            raise ValueError(f"book state layer {index} holds other rows than layer 0 (one row space cannot hold it)")
    for kind, owners in (("sequence", old.seqs), ("handle", old.handles)):
        for owner_id, tables in owners:
            if len(tables) != cfg.num_layers or any(
                    (t.rows, t.length, t.logical_start) != (tables[0].rows, tables[0].length, tables[0].logical_start)
                    for t in tables):
                raise ValueError(f"{kind} {owner_id} has other tables than in layer 0 (one row space cannot hold it)")
    config = PoolConfig(cfg.num_layers, cfg.block_size, cfg.slab_blocks, cfg.design, cfg.max_blocks_per_layer,
                        cfg.shrink, cfg.open_blocks)
    return BookState(v=STATE_VERSION, config=config, bytes_per_row=cfg.bytes_per_row, geometry=old.geometry,
                     rows=RowsState(first.row_block, first.row_refcount, first.free, first.capacity, first.parked),
                     seqs=[(seq_id, tables[0]) for seq_id, tables in old.seqs],
                     handles=[(hid, tables[0]) for hid, tables in old.handles], counters=old.counters,
                     next_block_id=old.next_block_id, next_handle_id=old.next_handle_id)
