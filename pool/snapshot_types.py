"""The pool's snapshot as typed records (plain data, no mlx), and the owner states of a physical row.

A ``PoolSnapshot`` describes one instant: geometry, stats, counters, every physical row's owner and refcount (once:
every layer holds the same rows, one row space) and per layer a ``LayerSnapshot`` with the figures storage and the
decode path observe per layer (capacity and free-row figures, gather runs, the fused decision). A *summary* is the
same record without the per-row arrays (``row_owner``/``row_refcount``/``seq_rows`` are None): timelines and
recordings keep summaries, and the full snapshot at any instant is rebuilt from a keyframe plus the op log
(``probes.rebuild``).

Row owners (``row_owner[r]``): a sequence id (>= 0), or one of ``Owner``'s negative codes. ``row_state`` turns an
(owner, refcount) pair into what a row *is*; every reader (the TUI's maps and grids included) asks it, so a new
owner code is handled in one place.
"""

from __future__ import annotations

from enum import Enum, IntEnum

import msgspec

from pool.config import MONOLITHIC_CHUNK_BLOCKS
from pool.fused_decision import FusedDecision
from pool.stats import PoolCounters, PoolStats


class Owner(IntEnum):
    """Negative owner codes of a row that no sequence references."""

    FREE = -1    # no live block
    HANDLE = -2  # held only by prefix handles (detached sequences, the prefix cache)


class RowState(str, Enum):
    FREE = "free"
    LIVE = "live"        # one reference, a sequence's
    SHARED = "shared"    # more than one reference, at least one a sequence's
    HANDLE = "held"      # only prefix handles


_FREE = int(Owner.FREE)  # a plain int: row_state runs once per row of a grid
_S_FREE, _S_LIVE, _S_SHARED, _S_HANDLE = RowState.FREE, RowState.LIVE, RowState.SHARED, RowState.HANDLE


def row_state(owner: int, refcount: int) -> RowState:
    """What a physical row is, from its owner code and refcount (a negative code other than FREE is a holder that
    is not a sequence: HANDLE; older recordings' -3, a block the caller held, reads so too)."""
    if refcount <= 0 or owner == _FREE:
        return _S_FREE
    if owner >= 0:
        return _S_SHARED if refcount > 1 else _S_LIVE
    return _S_HANDLE


class LayerSnapshot(msgspec.Struct, frozen=True):
    """One layer at one instant.

    ``num_chunks``: units of growth reserved: slabs (slab design) or 32-block grow chunks of the one tensor
    (monolithic design); ``capacity_rows = num_chunks * chunk_rows``. Free-row figures cover the whole capacity:
    ``holes`` are maximal runs of free rows, ``fragmentation = 1 - largest_free_run / free_rows`` (0 when
    nothing is free). ``gather_runs_hist``: same-slab runs per gather -> gathers, since the pool was built. Every
    layer holds the same rows, so the capacity and free-row figures are the pool's; a layer's own figures are its
    gathers and its fused decision.
    """

    num_chunks: int
    capacity_rows: int
    free_rows: int
    holes: int
    largest_free_run: int
    fragmentation: float
    gather_runs_hist: dict[int, int]
    fused: FusedDecision


class PoolSnapshot(msgspec.Struct, frozen=True):
    """The whole pool at one instant (schema in docs/contracts.md)."""

    design: str
    block_size: int
    slab_blocks: int
    num_layers: int
    dtype: str | None
    n_kv_heads: int | None
    head_dim: int | None
    bytes_per_row: int  # K+V bytes of one row (0 before the first write)
    stats: PoolStats
    counters: PoolCounters
    layers: list[LayerSnapshot]
    seq_rows: dict[int, list[int]] | None = None  # rows per sequence, logical order (None in a summary)
    row_owner: list[int] | None = None     # per physical row of the capacity, every layer's (None in a summary)
    row_refcount: list[int] | None = None  # per physical row, 0 = free (None in a summary)

    @property
    def chunk_rows(self) -> int:
        """Rows per unit of growth: ``slab_blocks`` (slab design) or the monolithic grow chunk."""
        return self.slab_blocks if self.design == "slab" else MONOLITHIC_CHUNK_BLOCKS

    @property
    def has_rows(self) -> bool:
        return self.seq_rows is not None

    def summary(self) -> "PoolSnapshot":
        """The same snapshot without per-row arrays (what timelines and recordings keep)."""
        if self.seq_rows is None and self.row_owner is None:
            return self
        return msgspec.structs.replace(self, seq_rows=None, row_owner=None, row_refcount=None)


class ObservedFigures(msgspec.Struct, frozen=True):
    """What a snapshot needs beyond the bookkeeping: figures only the running pool observes (or, in a replay,
    what the latest recorded snapshot said). ``stats`` and ``counters`` whole; per layer the gather-run histogram
    and the fused decision in force."""

    stats: PoolStats
    counters: PoolCounters
    gather_runs_hist: list[dict[int, int]]
    decisions: list[FusedDecision]
