"""Building the pool's snapshot (``pool.snapshot_types.PoolSnapshot``) from a book, cheap enough for several a second.

``build_snapshot(book, observed)`` reads the bookkeeping (``BlockBook``: topology, rows, refcounts, capacity) and
takes what the bookkeeping cannot know from ``observed`` (``ObservedFigures``: stats and counters as measured,
gather-run histograms, fused decisions). A live pool passes its own figures (``PagedKVPool.snapshot``); a replay
passes the recorded ones (``probes.rebuild``), so the same function serves both and no fake pool is needed.

Per layer it lists every physical row of the reserved capacity: its owner (a sequence id or an ``Owner`` code)
and refcount (0 free, > 1 shared), plus free-row figures:

* ``free_rows``: rows of the reserved capacity with no live block (freed rows and never-minted capacity);
* ``holes``: maximal runs of consecutive free rows;
* ``largest_free_run``: the longest such run;
* ``fragmentation = 1 - largest_free_run / free_rows`` (0.0 with no free rows). 0 means the free space is one run:
  a new sequence's blocks land on consecutive rows and its gathers read few runs. It tends to 1 as free space
  splits into many small holes: new blocks interleave with other sequences' rows, gathers need more runs, and
  (slab design) partly used slabs cannot be handed back.

Cost. Row lists are rebuilt only for layers whose rows or references changed since the last snapshot (a version
counter per layer, kept in a ``SnapshotCache``), and a layer whose tables map to the same rows as layer 0 (the
normal lockstep case) reuses layer 0's owner list after a C-level list comparison. ``slabscope bench snapshot``
measures it (docs/pool.md).
"""

from __future__ import annotations

from pool.config import chunk_rows
from pool.free_rows import fragmentation_index, free_run_stats
from pool.snapshot_types import LayerSnapshot, ObservedFigures, Owner, PoolSnapshot

OWNER_FREE, OWNER_HANDLE, OWNER_CALLER = int(Owner.FREE), int(Owner.HANDLE), int(Owner.CALLER)


class SnapshotCache:
    """Per-layer row lists of the last snapshot, keyed by the layer's version. Owned by whoever builds snapshots
    of one book (a pool, a replay); ``clear`` makes the next snapshot a cold one."""

    def __init__(self) -> None:
        self._layers: dict[int, tuple[tuple, dict]] = {}

    def clear(self) -> None:
        self._layers.clear()

    def get(self, layer: int, key: tuple) -> dict | None:
        cached = self._layers.get(layer)
        return cached[1] if cached is not None and cached[0] == key else None

    def put(self, layer: int, key: tuple, entry: dict) -> None:
        self._layers[layer] = (key, entry)


def build_snapshot(book, observed: ObservedFigures, cache: SnapshotCache | None = None) -> PoolSnapshot:
    """Snapshot of ``book`` (a BlockBook) with ``observed``'s figures. Mutates only ``cache``."""
    cache = SnapshotCache() if cache is None else cache
    geometry = book.geometry
    layer0 = _layer_rows(book, 0, None, cache)
    per_chunk = chunk_rows(book.design, book.slab_blocks)
    layers = [_layer_entry(layer0 if layer == 0 else _layer_rows(book, layer, layer0, cache), per_chunk,
                           observed, layer) for layer in range(book.num_layers)]
    return PoolSnapshot(
        design=book.design, block_size=book.block_size, slab_blocks=book.slab_blocks, num_layers=book.num_layers,
        dtype=geometry.dtype if geometry else None, n_kv_heads=geometry.n_kv_heads if geometry else None,
        head_dim=geometry.head_dim if geometry else None, bytes_per_row=book.bytes_per_row,
        stats=observed.stats, counters=observed.counters, layers=layers,
        seq_rows={seq_id: list(tables[0].rows) for seq_id, tables in book.seqs.items()},
    )


def _layer_entry(rows: dict, per_chunk: int, observed: ObservedFigures, layer: int) -> LayerSnapshot:
    return LayerSnapshot(
        num_chunks=rows["capacity_rows"] // per_chunk, capacity_rows=rows["capacity_rows"],
        free_rows=rows["free_rows"], holes=rows["holes"], largest_free_run=rows["largest_free_run"],
        fragmentation=rows["fragmentation"], gather_runs_hist=dict(sorted(observed.gather_runs_hist[layer].items())),
        fused=observed.decisions[layer], row_owner=list(rows["row_owner"]), row_refcount=list(rows["row_refcount"]))


def _layer_rows(book, layer: int, layer0: dict | None, cache: SnapshotCache) -> dict:
    """Row lists and free-row figures of one layer, cached by the layer's version."""
    rows = book.layers[layer]
    key = (book.versions[layer], rows.capacity, len(book.seqs), len(book.handles))
    entry = cache.get(layer, key)
    if entry is not None:
        return entry
    owner = None
    if layer0 is not None and _mirrors_layer0(book, layer) and layer0["capacity_rows"] == rows.capacity:
        owner = layer0["row_owner"]
    if owner is None:
        owner = _row_owners(book, layer)
    free, holes, largest, fragmentation = free_figures(book, layer)
    entry = {
        "capacity_rows": rows.capacity,
        "row_owner": owner,
        "row_refcount": rows.row_refcount + [0] * (rows.capacity - len(rows.row_refcount)),
        "free_rows": free, "holes": holes, "largest_free_run": largest, "fragmentation": fragmentation,
    }
    cache.put(layer, key, entry)
    return entry


def free_figures(book, layer: int) -> tuple[int, int, int, float]:
    """(free rows, holes, largest free run, fragmentation index) of one layer's reserved capacity."""
    rows = book.layers[layer]
    free, holes, largest = free_run_stats(rows.free.sorted_rows(), len(rows.row_block), rows.capacity)
    return free, holes, largest, fragmentation_index(free, largest)


def _mirrors_layer0(book, layer: int) -> bool:
    """True when every sequence and handle uses the same rows in ``layer`` as in layer 0 and no caller-held
    blocks exist: then the owner lists are identical."""
    if book.loose:
        return False
    if book.layers[layer].row_block.count(-1) != book.layers[0].row_block.count(-1):
        return False
    for tables in book.seqs.values():
        if tables[layer].rows != tables[0].rows:
            return False
    for tables in book.handles.values():
        if tables[layer].rows != tables[0].rows:
            return False
    return len(book.layers[layer].row_block) == len(book.layers[0].row_block)


def _row_owners(book, layer: int) -> list[int]:
    """Owner per row: the first sequence (insertion order) referencing it, else a handle or the caller code."""
    owner = [OWNER_FREE] * book.layers[layer].capacity
    for seq_id, tables in book.seqs.items():
        for row in tables[layer].rows:
            if owner[row] == OWNER_FREE:
                owner[row] = seq_id
    for tables in book.handles.values():
        for row in tables[layer].rows:
            if owner[row] == OWNER_FREE:
                owner[row] = OWNER_HANDLE
    for block_id in book.loose:
        block_layer, row = book.blocks[block_id]
        if block_layer == layer and owner[row] == OWNER_FREE:
            owner[row] = OWNER_CALLER
    return owner
