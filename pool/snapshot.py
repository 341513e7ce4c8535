"""The pool's plain-data snapshot (schema in docs/contracts.md), cheap enough to take several times a second.

Per layer it lists every physical row of the reserved capacity: its owner (a sequence id; -1 free; -2 held only
by prefix handles; -3 held only by the caller after ``restore_block``) and refcount (0 free, > 1 shared), plus
free-row figures:

* ``free_rows``: rows of the reserved capacity with no live block (freed rows and never-minted capacity);
* ``holes``: maximal runs of consecutive free rows;
* ``largest_free_run``: the longest such run;
* ``fragmentation = 1 - largest_free_run / free_rows`` (0.0 with no free rows). 0 means the free space is one run:
  a new sequence's blocks land on consecutive rows and its gathers read few runs. It tends to 1 as free space
  splits into many small holes: new blocks interleave with other sequences' rows, gathers need more runs, and
  (slab design) partly used slabs cannot be handed back.

Cost. Row lists are rebuilt only for layers whose rows or references changed since the last snapshot (a version
counter per layer), and a layer whose tables map to the same rows as layer 0 (the normal lockstep case) reuses
layer 0's owner list after a C-level list comparison. ``slabscope bench snapshot`` measures it (docs/pool.md).
"""

from __future__ import annotations

from pool.config import chunk_rows
from pool.free_rows import fragmentation_index, free_run_stats

OWNER_FREE = -1
OWNER_HANDLE = -2
OWNER_CALLER = -3


def build_snapshot(pool) -> dict:
    """Snapshot of ``pool`` (a PagedKVPool). Mutates only the pool's snapshot cache."""
    book = pool.book
    geometry = book.geometry or {}
    layer0 = _layer_rows(pool, 0, None)
    layers = [_layer_entry(pool, layer, layer0) for layer in range(book.num_layers)]
    return {
        "design": book.design, "block_size": book.block_size, "slab_blocks": book.slab_blocks,
        "num_layers": book.num_layers, "dtype": geometry.get("dtype"), "n_kv_heads": geometry.get("n_kv_heads"),
        "head_dim": geometry.get("head_dim"), "bytes_per_row": book.bytes_per_row,
        "stats": pool.stats().to_dict(),
        "counters": pool.counters(),
        "layers": layers,
        "seq_rows": {str(seq_id): list(tables[0].rows) for seq_id, tables in book.seqs.items()},
    }


def _layer_entry(pool, layer: int, layer0: dict) -> dict:
    rows = layer0 if layer == 0 else _layer_rows(pool, layer, layer0)
    last = pool.decisions.last.get(layer)
    if last is None:
        last = _default_decision(pool, layer)
    return {
        "num_slabs": rows["capacity_rows"] // chunk_rows(pool.book.design, pool.book.slab_blocks),
        "capacity_rows": rows["capacity_rows"],
        "row_owner": list(rows["row_owner"]),
        "row_refcount": list(rows["row_refcount"]),
        "free_rows": rows["free_rows"], "holes": rows["holes"], "largest_free_run": rows["largest_free_run"],
        "fragmentation": rows["fragmentation"],
        "gather_runs_hist": {str(runs): count for runs, count in sorted(pool.gather_runs_hist[layer].items())},
        "fused": {"use_fused": last.use_fused, "reason": last.reason},
    }


def _default_decision(pool, layer: int):
    """What the fused decision would say now for this layer's geometry (not counted as a decision)."""
    from pool.fused_decision import FusedDecision, decide

    geometry = pool.storage.geometry[layer]
    if geometry is None:
        return FusedDecision(False, "layer not written yet")
    backend = getattr(pool, "_snapshot_backend", None)
    if backend is None:
        from pool.fused_decision import detect_backend

        backend = pool._snapshot_backend = detect_backend()
    return decide(num_slabs=pool.storage.num_buffers(layer), dtype=geometry.dtype, head_dim=geometry.head_dim,
                  batch_size=max(1, len(pool.book.seqs)), backend=backend)


def _layer_rows(pool, layer: int, layer0: dict | None) -> dict:
    """Row lists and free-row figures of one layer, cached by the layer's version."""
    book = pool.book
    rows = book.layers[layer]
    key = (book.versions[layer], rows.capacity, len(book.seqs), len(book.handles))
    cached = pool._snapshot_cache.get(layer)
    if cached is not None and cached[0] == key:
        return cached[1]
    owner = None
    if layer0 is not None and _mirrors_layer0(book, layer) and layer0["capacity_rows"] == rows.capacity:
        owner = layer0["row_owner"]
    if owner is None:
        owner = _row_owners(book, layer)
    free, holes, largest = free_run_stats(rows.free.sorted_rows(), len(rows.row_block), rows.capacity)
    entry = {
        "capacity_rows": rows.capacity,
        "row_owner": owner,
        "row_refcount": rows.row_refcount + [0] * (rows.capacity - len(rows.row_refcount)),
        "free_rows": free, "holes": holes, "largest_free_run": largest,
        "fragmentation": fragmentation_index(free, largest),
    }
    pool._snapshot_cache[layer] = (key, entry)
    return entry


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
    """Owner per row: the first sequence (insertion order) referencing it, else -2 (handle) or -3 (caller)."""
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
