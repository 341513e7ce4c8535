"""Rebuilding the full pool snapshot at any instant: nearest keyframe at or before ``t`` + the op log (mlx-free).

Topology (rows, owners, refcounts, capacity, chunk counts, free-row figures, stats, growth counters) is exact at
``t``: the keyframe's bookkeeping state is restored (``BlockBook.from_state``) and the recorded sequence-level ops
up to ``t`` are re-executed (``pool.apply_op``); ``pool.build_snapshot`` then builds the snapshot from that book.
What the bookkeeping cannot know (gather-run histograms, gather counts, fused-decode decisions) comes from the
latest recorded snapshot at or before ``t`` (at most 1/snapshot_hz old). Seeking backward restores an earlier
keyframe; the cost is bounded by the ops between two keyframes.
"""

from __future__ import annotations

import bisect

import msgspec

from pool import BlockBook, FusedDecision, ObservedFigures, PoolCounters, PoolError, PoolSnapshot, apply_op, \
    build_snapshot
from probes.errors import RecordingError

GROWTH_COUNTERS = ("slab_appends", "grow_events", "bytes_copied")


def observed_from(book, recorded: PoolSnapshot, growth_base: PoolCounters, book_growth_base: dict) -> ObservedFigures:
    """What the rebuilt snapshot takes beyond the replayed book: stats modelled by the book (exact at t), growth
    counters as the keyframe's measured figures plus the book's modelled growth since, the bookkeeping's own
    counters, and the recorded gather histograms, gather counts and fused decisions (as of ``recorded``)."""
    growth = {k: getattr(growth_base, k) + getattr(book.counters, k) - book_growth_base[k] for k in GROWTH_COUNTERS}
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
    """Serves ``snapshot_at(t)`` for one ``SessionModel``. Mutates nothing in it."""

    def __init__(self, model) -> None:
        self.model = model

    def snapshot_at(self, t: float) -> PoolSnapshot | None:
        """The rebuilt snapshot at ``t`` (None before the first keyframe). ``RecordingError`` when the op log does
        not replay on its keyframe (a damaged or spliced session)."""
        model = self.model
        i = bisect.bisect_right(model.keyframes, t, key=lambda kf: kf.t)
        if i == 0:
            return None
        keyframe = model.keyframes[i - 1].load()
        if keyframe.book_state is None:
            return keyframe.snapshot  # a keyframe without bookkeeping state: the best exact answer is itself
        book = BlockBook.from_state(keyframe.book_state)
        handles = book.handle_map()
        book_growth_base = {k: getattr(book.counters, k) for k in GROWTH_COUNTERS}
        recorded = model.summary_at(t)
        # A snapshot taken exactly at t decides ties: ops stamped at the same instant came after it.
        limit = recorded.op_index if recorded is not None and recorded.t == t else None
        for entry in model.ops_range(keyframe.op_index, t):
            if limit is not None and entry.i >= limit:
                break
            try:
                apply_op(book, entry.op, handles)
            except PoolError as exc:
                raise RecordingError(model.source, f"op {entry.i} ({entry.op.name}) does not replay on the keyframe "
                                                   f"at {keyframe.t:.3f} s: {exc}") from None
        recorded_snap = recorded.snapshot if recorded is not None and recorded.t >= keyframe.t else keyframe.snapshot
        return build_snapshot(book, observed_from(book, recorded_snap, keyframe.snapshot.counters, book_growth_base))
