"""What-if replay: re-run a session's op log through the pool bookkeeping alone with another geometry (mlx-free).

"What would this workload have cost with 64-block slabs / 16-token blocks / the monolithic design?" The recorded
sequence-level ops (add/prepare_write/release/clone/detach/adopt/trim/...) are re-executed on a fresh
``pool.BlockBook`` built with the requested geometry; the derived ops are recomputed by the book itself. At every
instant where the recording took a pool snapshot the replay measures slab count, reserved bytes, live blocks,
fragmentation (layer 0; layers move in lockstep) and the gather runs every live sequence would need.

With the recorded geometry the replay must reproduce the recording exactly: ``mismatches_with_recording`` lists
every figure that differs (the tests, and the last line ``slabscope whatif`` prints, rely on it).

Copied bytes here are the bookkeeping's *model* (``bytes_copied_model``: old rows x bytes per row per monolithic
growth; the slab design copies nothing): a replay has no storage to measure. The recording's measured figure
(``bytes_copied``, from the allocator) is not replayed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pool import BlockBook, PoolError, apply_op
from pool.config import blocks_for_tokens, chunk_rows
from pool.free_rows import fragmentation_index, free_run_stats
from pool.gather_runs import count_runs
from probes.errors import ReplayError

CHECKED_STATS = ("allocated_blocks", "live_blocks", "free_blocks", "bytes_reserved", "bytes_in_use",
                 "num_sequences", "num_handles")
CHECKED_COUNTERS = ("slab_appends", "grow_events", "bytes_copied_model", "cow_copies", "rows_minted",
                    "rows_reused")
CHECKED_LAYER0 = ("num_slabs", "capacity_rows", "free_rows", "holes", "largest_free_run", "fragmentation")


@dataclass
class WhatIfPoint:
    """The replayed pool at one recorded snapshot instant."""

    t: float
    op_index: int
    stats: dict
    counters: dict
    layer0: dict
    runs: list[int]  # gather runs per live sequence (layer 0)


@dataclass
class WhatIfResult:
    config: dict
    recorded_config: dict
    points: list[WhatIfPoint] = field(default_factory=list)
    ops_replayed: int = 0
    skipped: list[str] = field(default_factory=list)  # ops the new geometry cannot execute, with the reason

    def summary(self) -> dict:
        """Headline figures over the whole replay."""
        pts = self.points
        runs = [r for p in pts for r in p.runs]
        hist = Counter(runs)
        last = pts[-1] if pts else None
        return {
            "config": self.config,
            "ops_replayed": self.ops_replayed,
            "ops_skipped": len(self.skipped),
            "max_slabs_per_layer": max((p.layer0["num_slabs"] for p in pts), default=0),
            "final_slabs_per_layer": last.layer0["num_slabs"] if last else 0,
            "peak_bytes_reserved": max((p.stats["bytes_reserved"] for p in pts), default=0),
            "final_bytes_reserved": last.stats["bytes_reserved"] if last else 0,
            "peak_bytes_in_use": max((p.stats["bytes_in_use"] for p in pts), default=0),
            "max_fragmentation": max((p.layer0["fragmentation"] for p in pts), default=0.0),
            "mean_fragmentation": sum(p.layer0["fragmentation"] for p in pts) / len(pts) if pts else 0.0,
            "mean_gather_runs": sum(runs) / len(runs) if runs else 0.0,
            "max_gather_runs": max(runs, default=0),
            "gather_runs_hist": {str(k): v for k, v in sorted(hist.items())},
            "slab_appends": last.counters["slab_appends"] if last else 0,
            "grow_events": last.counters["grow_events"] if last else 0,
            "bytes_copied_model": last.counters["bytes_copied_model"] if last else 0,
        }


def recorded_config(view) -> dict:
    """The pool geometry the session ran with (meta["pool"], else its first keyframe)."""
    pool_meta = dict(view.meta.get("pool") or {})
    if not pool_meta.get("num_layers") and view.keyframes:
        snap = view.keyframes[0].load()[1]["snapshot"]
        pool_meta = {k: snap[k] for k in ("num_layers", "block_size", "slab_blocks", "design")}
    if not pool_meta.get("num_layers"):
        raise ReplayError("session has no pool (dense backend?): nothing to replay")
    return {"num_layers": int(pool_meta["num_layers"]), "block_size": int(pool_meta.get("block_size", 32)),
            "slab_blocks": int(pool_meta.get("slab_blocks", 32)), "design": pool_meta.get("design", "slab")}


def run_whatif(view, *, slab_blocks: int | None = None, block_size: int | None = None,
               design: str | None = None) -> WhatIfResult:
    """Replay ``view``'s op log (a Session or LiveStore) with the given overrides; None keeps the recorded value."""
    base = recorded_config(view)
    cfg = dict(base)
    for name, value in (("slab_blocks", slab_blocks), ("block_size", block_size), ("design", design)):
        if value is not None:
            cfg[name] = value
    try:
        book = BlockBook(cfg["num_layers"], cfg["block_size"], cfg["design"], cfg["slab_blocks"], None)
    except PoolError as exc:
        raise ReplayError(str(exc)) from None
    result = WhatIfResult(config=cfg, recorded_config=base)
    handles: dict = {}
    marks = [(s["op_index"], s["t"]) for s in view.snapshots]
    mark = 0
    ops = view.ops
    for index, op in enumerate(ops):
        while mark < len(marks) and marks[mark][0] <= index:
            result.points.append(_measure(book, marks[mark]))
            mark += 1
        _replay_one(book, op, handles, cfg, base, result)
    for op_index, t in marks[mark:]:
        result.points.append(_measure(book, (op_index, t)))
    return result


def _replay_one(book, op: dict, handles: dict, cfg: dict, base: dict, result: WhatIfResult) -> None:
    """Apply one op, adapting what the new geometry changes; record ops it cannot execute."""
    name = op.get("op")
    if name == "set_slab_blocks" and cfg["slab_blocks"] != base["slab_blocks"]:
        return  # the what-if fixes its own slab size
    if name == "storage_init" and book.geometry is None:
        scale = cfg["block_size"] / base["block_size"]
        book.set_geometry(op["dtype"], op["n_kv_heads"], op["head_dim"], int(op["bytes_per_row"] * scale))
        return
    try:
        if apply_op(book, op, handles):
            result.ops_replayed += 1
    except PoolError as exc:
        if name == "trim":  # a trim aligned to the recorded block size may not align to the new one
            result.skipped.append(f"op {op.get('i')}: {exc}")
            return
        raise ReplayError(f"op {op.get('i')} ({name}) cannot be replayed with {cfg}: {exc}") from None


def _measure(book, mark: tuple[int, float]) -> WhatIfPoint:
    op_index, t = mark
    bpr = book.bytes_per_row
    layers = book.layers
    live = sum(rows.num_live for rows in layers)
    allocated = sum(len(rows.row_block) for rows in layers)
    stats = {"allocated_blocks": allocated, "live_blocks": live, "free_blocks": allocated - live,
             "bytes_reserved": sum(rows.capacity for rows in layers) * bpr, "bytes_in_use": live * bpr,
             "num_sequences": len(book.seqs), "num_handles": len(book.handles)}
    rows0 = layers[0]
    free, holes, largest = free_run_stats(rows0.free.sorted_rows(), len(rows0.row_block), rows0.capacity)
    layer0 = {"num_slabs": rows0.capacity // chunk_rows(book.design, book.slab_blocks),
              "capacity_rows": rows0.capacity, "free_rows": free, "holes": holes, "largest_free_run": largest,
              "fragmentation": fragmentation_index(free, largest)}
    runs = []
    for tables in book.seqs.values():
        table = tables[0]
        visible = table.rows[table.logical_start // book.block_size:blocks_for_tokens(table.length,
                                                                                       book.block_size)]
        if visible:
            runs.append(count_runs(visible, book.slab_blocks) if book.design == "slab" else 1)
    counters = book.counters.to_dict()
    counters["bytes_copied_model"] = counters.pop("bytes_copied")  # the book's figure is a model: named so
    return WhatIfPoint(t, op_index, stats, counters, layer0, runs)


def mismatches_with_recording(view, result: WhatIfResult) -> list[str]:
    """Every recorded snapshot figure the replay does not reproduce (empty list: exact)."""
    problems = []
    for point, recorded in zip(result.points, view.snapshots):
        snap = recorded["snapshot"]
        for key in CHECKED_STATS:
            if snap["stats"].get(key) != point.stats[key]:
                problems.append(f"t={point.t:.3f} stats.{key}: recorded {snap['stats'].get(key)}, "
                                f"replayed {point.stats[key]}")
        for key in CHECKED_COUNTERS:
            value = _recorded_counter(snap["counters"], key)
            if value != point.counters[key]:
                problems.append(f"t={point.t:.3f} counters.{key}: recorded {value}, replayed {point.counters[key]}")
        layer0 = snap["layers"][0] if snap.get("layers") else {}
        for key in CHECKED_LAYER0:
            if layer0.get(key) != point.layer0[key]:
                problems.append(f"t={point.t:.3f} layers[0].{key}: recorded {layer0.get(key)}, "
                                f"replayed {point.layer0[key]}")
    if len(result.points) != len(view.snapshots):
        problems.append(f"{len(view.snapshots)} recorded snapshots, {len(result.points)} replayed points")
    return problems


def _recorded_counter(counters: dict, key: str):
    """A recorded counter; recordings made before copies were measured have only ``bytes_copied``, which was the
    modelled figure then."""
    if key == "bytes_copied_model" and key not in counters:
        return counters.get("bytes_copied")
    return counters.get(key)
