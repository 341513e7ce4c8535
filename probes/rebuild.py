"""Rebuilding the full pool snapshot at any instant: nearest keyframe at or before ``t`` + the op log (mlx-free).

Topology (rows, owners, refcounts, capacity, slab counts, free-row figures, stats, growth counters) is exact at
``t``: the keyframe's bookkeeping state is restored into a ``pool.BlockBook`` and the recorded sequence-level ops up
to ``t`` are re-executed (pool.apply_op). What the bookkeeping cannot know (gather-run histograms, gather counts,
fused-decode decisions) is taken from the latest recorded snapshot at or before ``t`` (at most 1/snapshot_hz old).
Seeking backward restores an earlier keyframe; the cost is bounded by the ops between two keyframes.
"""

from __future__ import annotations

import bisect

import msgspec

from pool import FusedDecision, ObservedFigures, PoolCounters, PoolSnapshot, apply_op, build_snapshot
from probes.bookstate import book_from_state
from probes.v1 import op_from_v1, snapshot_from_v1, snapshot_to_v1

GROWTH_COUNTERS = ("slab_appends", "grow_events", "bytes_copied")


def observed_from(book, recorded: PoolSnapshot, growth_base: PoolCounters, book_growth_base: dict) -> ObservedFigures:
    """What the rebuilt snapshot takes beyond the replayed book: stats modelled by the book (exact at t), growth
    counters as the keyframe's measured figures plus the book's modelled growth since, the bookkeeping's own
    counters, and the recorded gather histograms, gather counts and fused decisions (as of ``recorded``)."""
    growth = {k: getattr(growth_base, k) + getattr(book.counters, k) - book_growth_base.get(k, 0)
              for k in GROWTH_COUNTERS}
    counters = msgspec.structs.replace(recorded.counters, cow_copies=book.counters.cow_copies,
                                       rows_minted=book.counters.rows_minted, rows_reused=book.counters.rows_reused,
                                       **growth)
    layers = recorded.layers
    hist = [dict(layers[i].gather_runs_hist) if i < len(layers) else {} for i in range(book.num_layers)]
    decisions = [layers[i].fused if i < len(layers) else FusedDecision(False, "no decision recorded")
                 for i in range(book.num_layers)]
    return ObservedFigures(book.stats(), counters, hist, decisions)


def modelled_observed(book) -> ObservedFigures:
    """Figures for a book that never ran on storage (synthetic sessions): everything the book models, no gathers
    and no fused decisions."""
    c = book.counters
    counters = PoolCounters(slab_appends=c.slab_appends, grow_events=c.grow_events, bytes_copied=c.bytes_copied,
                            cow_copies=c.cow_copies, rows_minted=c.rows_minted, rows_reused=c.rows_reused)
    return ObservedFigures(book.stats(), counters, [{} for _ in range(book.num_layers)],
                           [FusedDecision(False, "no decision recorded")] * book.num_layers)


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
        book_growth_base = {k: getattr(book.counters, k) for k in GROWTH_COUNTERS}
        recorded = view._latest_at(view.snapshots, t)
        # A snapshot taken exactly at t decides ties: ops stamped at the same instant came after it.
        limit = recorded["op_index"] if recorded is not None and recorded["t"] == t else None
        for op in view.ops_range(op_index, t):
            if limit is not None and op["i"] >= limit:
                break
            apply_op(book, op_from_v1(op), handles)
        recorded_snap = snapshot_from_v1(recorded["snapshot"] if recorded is not None else snap)
        observed = observed_from(book, recorded_snap, snapshot_from_v1(snap).counters, book_growth_base)
        return snapshot_to_v1(build_snapshot(book, observed))


def _unpack(loaded) -> tuple[int, dict, dict | None]:
    op_index, payload = loaded
    return op_index, payload["snapshot"], payload.get("book")
