"""Rebuilding the full pool snapshot at any instant: nearest keyframe at or before ``t`` + the op log (mlx-free).

Topology (rows, owners, refcounts, capacity, chunk counts, free-row figures, stats, growth counters) and the
measured copy counters are exact at ``t``: the keyframe's bookkeeping state is restored (``BlockBook.from_state``),
the recorded sequence-level ops up to ``t`` are re-executed (``pool.apply_op``) and the recorded ``copied`` ops
(``pool.Copied``: what storage measured) are added to the keyframe's measured counters; ``pool.build_snapshot``
then builds the snapshot from that book. What the bookkeeping cannot know (gather-run histograms, gather counts,
fused-decode decisions) comes from the latest recorded snapshot at or before ``t`` (at most 1/snapshot_hz old).
Seeking backward restores an earlier keyframe; the cost is bounded by the ops between two keyframes.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import NamedTuple

import msgspec

from pool import BlockBook, Copied, FusedDecision, ObservedFigures, PoolCounters, PoolError, PoolSnapshot, \
    apply_op, build_snapshot
from pool.errors import BudgetExceeded
from probes import limits
from probes.errors import RecordingError


class MeasuredCopies(NamedTuple):
    """Bytes storage measured copying since the keyframe (the sum of the ``copied`` ops replayed): by growth, by
    copy-on-write, by shrinks (block moves, monolithic allocate-smaller-and-copy)."""

    growth: int = 0
    cow: int = 0
    moved: int = 0

    def add(self, op: Copied) -> "MeasuredCopies":
        return MeasuredCopies(self.growth + op.bytes, self.cow + op.cow_bytes, self.moved + op.moved_bytes)


def growth_counters(book, base: PoolCounters, book_base, copied: MeasuredCopies) -> dict:
    """Growth and copy counters at the replayed instant: the keyframe's figures (``base``) plus what happened since
    (the book's modelled growth beyond ``book_base``, its counters at the keyframe; the measured ``copied``).
    A recording made before copies were measured (``base.bytes_copied_model`` None) stored the model as
    ``bytes_copied``, so there it follows the book's model and the measured fields stay unrecorded (None)."""
    c = book.counters
    figures = {"slab_appends": base.slab_appends + c.slab_appends - book_base.slab_appends,
               "grow_events": base.grow_events + c.grow_events - book_base.grow_events}
    modelled = c.bytes_copied - book_base.bytes_copied
    if base.bytes_copied_model is None:
        return dict(figures, bytes_copied=base.bytes_copied + modelled)
    return dict(figures, bytes_copied=base.bytes_copied + copied.growth,
                bytes_copied_model=base.bytes_copied_model + modelled,
                cow_bytes_copied=(base.cow_bytes_copied or 0) + copied.cow,
                cow_bytes_copied_model=c.cow_copies * book.bytes_per_row, bytes_moved=base.bytes_moved + copied.moved)


def shrink_counters(book) -> dict:
    """The shrink counters the bookkeeping decides (exact at the replayed instant: the keyframe's book state carries
    them and the replayed ``shrink`` points add to them)."""
    c = book.counters
    return {"slab_releases": c.slab_releases, "bytes_released": c.bytes_released, "blocks_moved": c.blocks_moved,
            "bytes_moved_model": c.bytes_moved}


def observed_from(book, recorded: PoolSnapshot, growth: dict) -> ObservedFigures:
    """What the rebuilt snapshot takes beyond the replayed book: stats modelled by the book (exact at t), the
    ``growth`` counters (:func:`growth_counters`), the bookkeeping's own counters, and the recorded gather
    histograms, gather counts and fused decisions (as of ``recorded``)."""
    counters = msgspec.structs.replace(recorded.counters, cow_copies=book.counters.cow_copies,
                                       rows_minted=book.counters.rows_minted, rows_reused=book.counters.rows_reused,
                                       **shrink_counters(book), **growth)
    layers = recorded.layers
    hist = [dict(layers[i].gather_runs_hist) if i < len(layers) else {} for i in range(book.num_layers)]
    decisions = [layers[i].fused if i < len(layers) else FusedDecision(False, "no decision recorded")
                 for i in range(book.num_layers)]
    return ObservedFigures(book.stats(), counters, hist, decisions)


def modelled_observed(book) -> ObservedFigures:
    """Figures for a book that never ran on storage (synthetic sessions): everything the book models, no gathers,
    no fused decisions and no measured copies (``bytes_copied`` is the model, as in a recording made before copies
    were measured)."""
    c = book.counters
    counters = PoolCounters(slab_appends=c.slab_appends, grow_events=c.grow_events, bytes_copied=c.bytes_copied,
                            cow_copies=c.cow_copies, rows_minted=c.rows_minted, rows_reused=c.rows_reused,
                            bytes_moved=c.bytes_moved, **shrink_counters(book))
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
        book = BlockBook.from_state(keyframe.book_state, max_blocks_per_layer=limits.rows_per_layer(
            keyframe.book_state.config.num_layers))  # a replay holds what the recording could: no runaway op
        handles = book.handle_map()
        book_base = replace(book.counters)
        copied = MeasuredCopies()
        recorded = model.summary_at(t)
        # A snapshot taken exactly at t decides ties: ops stamped at the same instant came after it.
        limit = recorded.op_index if recorded is not None and recorded.t == t else None
        replayed = keyframe.op_index
        for entry in model.ops_range(keyframe.op_index, t):
            if limit is not None and entry.i >= limit:
                break
            if entry.i != replayed:
                raise RecordingError(model.source, f"op {replayed} is missing from the op log (found op {entry.i})")
            replayed += 1
            match entry.op:
                case Copied() as op:
                    copied = copied.add(op)
                case op:
                    try:
                        apply_op(book, op, handles)
                    except BudgetExceeded:
                        raise RecordingError(model.source, f"op {entry.i} ({op.name}) would hold more than "
                                                           f"{book.max_blocks_per_layer:,} blocks per layer, the most "
                                                           "a replay holds (SLABSCOPE_MAX_REPLAY_ROWS)") from None
                    except PoolError as exc:
                        raise RecordingError(model.source, f"op {entry.i} ({op.name}) does not replay on the "
                                                           f"keyframe at {keyframe.t:.3f} s: {exc}") from None
        _check_replayed(model, book, keyframe, recorded, replayed)
        recorded_snap = recorded.snapshot if recorded is not None and recorded.t >= keyframe.t else keyframe.snapshot
        growth = growth_counters(book, keyframe.snapshot.counters, book_base, copied)
        return build_snapshot(book, observed_from(book, recorded_snap, growth))


def _check_replayed(model, book, keyframe, recorded, replayed: int) -> None:
    """RecordingError unless the replay reached the op count the latest snapshot summary names (an op log that
    ends early, or an ``op_index`` past it, would otherwise rebuild an older pool silently), and the rebuilt
    capacity is one a reader holds."""
    if recorded is not None and recorded.t >= keyframe.t and replayed < recorded.op_index:
        raise RecordingError(model.source, f"the snapshot at {recorded.t:.3f} s counts {recorded.op_index} ops "
                                           f"before it; the op log replays only up to op {replayed}")
    rows = book.capacity * book.num_layers
    if rows > limits.max_replay_rows():
        raise RecordingError(model.source, f"the replayed pool reserves {rows:,} rows, over the "
                                           f"{limits.max_replay_rows():,} a reader holds (SLABSCOPE_MAX_REPLAY_ROWS)")
