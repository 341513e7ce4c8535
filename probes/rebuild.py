"""Rebuilding the full pool snapshot at any instant: nearest keyframe at or before ``t`` + the op log (mlx-free).

Topology (rows, owners, refcounts, capacity, slab counts, free-row figures, stats, growth counters) and the
measured copy counters are exact at ``t``: the keyframe's bookkeeping state is restored into a ``pool.BlockBook``,
the recorded sequence-level ops up to ``t`` are re-executed (pool.apply_op) and the recorded ``copied`` ops added. What the bookkeeping cannot know (gather-run histograms, gather counts,
fused-decode decisions) is taken from the latest recorded snapshot at or before ``t`` (at most 1/snapshot_hz old).
Seeking backward restores an earlier keyframe; the cost is bounded by the ops between two keyframes.
"""

from __future__ import annotations

import bisect
from collections import Counter
from types import SimpleNamespace

from pool import apply_op
from pool.fused_decision import FusedDecision
from pool.snapshot import build_snapshot
from pool.stats import PoolStats
from probes.bookstate import book_from_state

# snapshot counter -> the book's counter that models it (the measured bytes_copied comes from the latest snapshot)
GROWTH_COUNTERS = {"slab_appends": "slab_appends", "grow_events": "grow_events", "bytes_copied_model": "bytes_copied"}


class _BookPool:
    """The pool surface ``pool.snapshot.build_snapshot`` reads, served from a replayed book plus the non-topology
    figures of a recorded snapshot. Owns nothing but its snapshot cache."""

    def __init__(self, book, recorded: dict, growth_base: dict, book_growth_base: dict) -> None:
        self.book = book
        self._recorded = recorded
        growth_base = dict(growth_base)
        # recordings made before copies were measured: their bytes_copied was the model
        growth_base.setdefault("bytes_copied_model", growth_base.get("bytes_copied", 0))
        self._growth = {k: growth_base.get(k, 0) + getattr(book.counters, attr) - book_growth_base.get(k, 0)
                        for k, attr in GROWTH_COUNTERS.items()}
        layers = recorded.get("layers", [])
        self.gather_runs_hist = [Counter({int(k): v for k, v in layer.get("gather_runs_hist", {}).items()})
                                 for layer in layers] or [Counter() for _ in range(book.num_layers)]
        last = {i: FusedDecision(False, "no decision recorded") for i in range(book.num_layers)}
        last.update({i: FusedDecision(bool(layer["fused"]["use_fused"]), str(layer["fused"]["reason"]))
                     for i, layer in enumerate(layers) if "fused" in layer})
        self.decisions = SimpleNamespace(last=last)
        self.measured: dict | None = None  # measured copy counters at t (keyframe + copied ops), when recorded
        self._snapshot_cache: dict = {}

    def stats(self) -> PoolStats:
        layers, bpr = self.book.layers, self.book.bytes_per_row
        live = sum(rows.num_live for rows in layers)
        allocated = sum(len(rows.row_block) for rows in layers)
        return PoolStats(allocated_blocks=allocated, live_blocks=live, free_blocks=allocated - live,
                         bytes_reserved=sum(rows.capacity for rows in layers) * bpr, bytes_in_use=live * bpr,
                         num_sequences=len(self.book.seqs), num_handles=len(self.book.handles))

    def counters(self) -> dict:
        recorded = dict(self._recorded.get("counters", {}))
        book = self.book.counters
        recorded.update(self._growth, cow_copies=book.cow_copies, rows_minted=book.rows_minted,
                        rows_reused=book.rows_reused, cow_bytes_copied_model=book.cow_copies * self.book.bytes_per_row)
        if self.measured is not None:
            recorded.update(self.measured)
        else:
            recorded["bytes_copied"] = recorded["bytes_copied_model"]
        return recorded


class SnapshotRebuilder:
    """Serves ``snapshot_at(t)`` for one ``SessionView``. Mutates nothing in the view."""

    def __init__(self, view) -> None:
        self.view = view

    def snapshot_at(self, t: float) -> dict | None:
        """The rebuilt snapshot at ``t`` (None before the first keyframe)."""
        view = self.view
        keyframes = view.keyframes
        i = bisect.bisect_right(keyframes, t, key=lambda kf: kf.t)
        if i == 0:
            return None
        op_index, snap, state = _unpack(keyframes[i - 1].load())
        if state is None:
            return snap  # keyframe without book state: the best exact answer is the keyframe itself
        book, handles = book_from_state(state)
        book_growth_base = {k: getattr(book.counters, attr) for k, attr in GROWTH_COUNTERS.items()}
        recorded = view._latest_at(view.snapshots, t)
        # A snapshot taken exactly at t decides ties: ops stamped at the same instant came after it.
        limit = recorded["op_index"] if recorded is not None and recorded["t"] == t else None
        measured = _measured_base(snap.get("counters", {}))
        for op in view.ops_range(op_index, t):
            if limit is not None and op["i"] >= limit:
                break
            apply_op(book, op, handles)
            if op.get("op") == "copied":
                measured["bytes_copied"] += op["bytes"]
                measured["cow_bytes_copied"] += op["cow_bytes"]
        recorded_snap = recorded["snapshot"] if recorded is not None else snap
        shim = _BookPool(book, recorded_snap, snap.get("counters", {}), book_growth_base)
        if measured is not None:  # else a recording from before copies were measured: bytes_copied was the model
            shim.measured = measured
        return build_snapshot(shim)


def _measured_base(counters: dict) -> dict | None:
    """The measured copy counters at a keyframe, which ``copied`` ops then advance (None: an old recording)."""
    if "bytes_copied_model" not in counters:
        return None
    return {"bytes_copied": counters.get("bytes_copied", 0), "cow_bytes_copied": counters.get("cow_bytes_copied", 0)}


def _unpack(loaded) -> tuple[int, dict, dict | None]:
    op_index, payload = loaded
    return op_index, payload["snapshot"], payload.get("book")
