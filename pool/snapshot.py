"""Building the pool's snapshot (``pool.snapshot_types.PoolSnapshot``) from a book, cheap enough for several a second.

``build_snapshot(book, observed)`` reads the bookkeeping (``BlockBook``: topology, rows, refcounts, capacity) and
takes what the bookkeeping cannot know from ``observed`` (``ObservedFigures``: stats and counters as measured,
gather-run histograms, fused decisions). A live pool passes its own figures (``PagedKVPool.snapshot``); a replay
passes the recorded ones (``probes.rebuild``), so the same function serves both and no fake pool is needed.

It lists every physical row of the reserved capacity once (every layer holds the same rows): its owner (a sequence
id or an ``Owner`` code) and refcount (0 free, > 1 shared), plus free-row figures, which every layer's entry
repeats beside that layer's gather runs and fused decision:

* ``free_rows``: rows of the reserved capacity with no live block (freed rows and never-minted capacity);
* ``holes``: maximal runs of consecutive free rows;
* ``largest_free_run``: the longest such run;
* ``fragmentation = 1 - largest_free_run / free_rows`` (0.0 with no free rows). 0 means the free space is one run:
  a new sequence's blocks land on consecutive rows and its gathers read few runs. It tends to 1 as free space
  splits into many small holes: new blocks interleave with other sequences' rows, gathers need more runs, and
  (slab design) partly used slabs cannot be handed back.

Cost. The row lists are rebuilt only when rows or references changed since the last snapshot (the book's version,
kept in a ``SnapshotCache``); one list serves every layer. ``slabscope bench snapshot`` measures it (docs/pool.md).
"""

from __future__ import annotations

from pool.config import chunk_rows
from pool.free_rows import fragmentation_index, free_run_stats
from pool.snapshot_types import LayerSnapshot, ObservedFigures, Owner, PoolSnapshot

OWNER_FREE, OWNER_HANDLE = int(Owner.FREE), int(Owner.HANDLE)


class SnapshotCache:
    """The row lists of the last snapshot, keyed by the book's version. Owned by whoever builds snapshots of one
    book (a pool, a replay); ``clear`` makes the next snapshot a cold one."""

    def __init__(self) -> None:
        self._entry: tuple[tuple, dict] | None = None

    def clear(self) -> None:
        self._entry = None

    def get(self, key: tuple) -> dict | None:
        return self._entry[1] if self._entry is not None and self._entry[0] == key else None

    def put(self, key: tuple, entry: dict) -> None:
        self._entry = (key, entry)


def build_snapshot(book, observed: ObservedFigures, cache: SnapshotCache | None = None) -> PoolSnapshot:
    """Snapshot of ``book`` (a BlockBook) with ``observed``'s figures. Mutates only ``cache``."""
    cache = SnapshotCache() if cache is None else cache
    geometry = book.geometry
    rows = _rows(book, cache)
    per_chunk = chunk_rows(book.design, book.slab_blocks)
    layers = [_layer_entry(rows, per_chunk, observed, layer) for layer in range(book.num_layers)]
    return PoolSnapshot(
        design=book.design, block_size=book.block_size, slab_blocks=book.slab_blocks, num_layers=book.num_layers,
        dtype=geometry.dtype if geometry else None, n_kv_heads=geometry.n_kv_heads if geometry else None,
        head_dim=geometry.head_dim if geometry else None, bytes_per_row=book.bytes_per_row,
        stats=observed.stats, counters=observed.counters, layers=layers,
        seq_rows={seq_id: list(table.rows) for seq_id, table in book.seqs.items()},
        row_owner=list(rows["row_owner"]), row_refcount=list(rows["row_refcount"]),
    )


def _layer_entry(rows: dict, per_chunk: int, observed: ObservedFigures, layer: int) -> LayerSnapshot:
    return LayerSnapshot(
        num_chunks=rows["capacity_rows"] // per_chunk, capacity_rows=rows["capacity_rows"],
        free_rows=rows["free_rows"], holes=rows["holes"], largest_free_run=rows["largest_free_run"],
        fragmentation=rows["fragmentation"], gather_runs_hist=dict(sorted(observed.gather_runs_hist[layer].items())),
        fused=observed.decisions[layer])


def _rows(book, cache: SnapshotCache) -> dict:
    """Row lists and free-row figures of the row space, cached by the book's version."""
    key = (book.version, book.capacity, len(book.seqs), len(book.handles))
    entry = cache.get(key)
    if entry is not None:
        return entry
    free, holes, largest, fragmentation = free_figures(book)
    entry = {
        "capacity_rows": book.capacity,
        "row_owner": _row_owners(book),
        "row_refcount": book.row_refcount + [0] * (book.capacity - len(book.row_refcount)),
        "free_rows": free, "holes": holes, "largest_free_run": largest, "fragmentation": fragmentation,
    }
    cache.put(key, entry)
    return entry


def free_figures(book) -> tuple[int, int, int, float]:
    """(free rows, holes, largest free run, fragmentation index) of the reserved capacity."""
    free, holes, largest = free_run_stats(book.free.sorted_rows(), len(book.row_block), book.capacity)
    return free, holes, largest, fragmentation_index(free, largest)


def _row_owners(book) -> list[int]:
    """Owner per row: the first sequence (insertion order) referencing it, else a handle code."""
    owner = [OWNER_FREE] * book.capacity
    for seq_id, table in book.seqs.items():
        for row in table.rows:
            if owner[row] == OWNER_FREE:
                owner[row] = seq_id
    for table in book.handles.values():
        for row in table.rows:
            if owner[row] == OWNER_FREE:
                owner[row] = OWNER_HANDLE
    return owner
