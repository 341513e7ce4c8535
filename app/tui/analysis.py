"""What the views draw, derived from typed pool snapshots (``pool.PoolSnapshot``) and sessions (``SessionModel``).

No Textual, no mlx: plain data in, plain data out, unit-tested in tests/tui/test_analysis.py. Nothing here
re-implements a pool or probes computation: row states come from ``pool.row_state`` (which knows every owner
code), free runs and fragmentation from ``pool.free_rows``, same-slab runs from
``pool.gather_runs``, the accounting split from ``probes.sampler``. What stays here is display arithmetic: slab
cells, totals over layers, the next request's need, who freed a run.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from app.workloads.shrink_points import ShrinkTally
from pool import LayerSnapshot, PoolSnapshot, RowState, row_state
from pool.free_rows import free_runs as pool_free_runs
from pool.gather_runs import split_runs, table_runs
from pool.ops import Detach, Release, Trim
from probes.events import Shrunk
from probes.meta import memory_model_of
from probes.sampler import AccountingPart, accounting_parts
from probes.store import SessionModel

HISTORY_LIMIT = 400  # snapshots scanned backwards when asking who freed a run


@dataclass
class SlabCell:
    """Occupancy of one slab (monolithic: one grow chunk) of one layer, in rows."""

    capacity: int
    live: int = 0
    shared: int = 0
    held: int = 0    # only prefix handles

    @property
    def used(self) -> int:
        return self.live + self.shared + self.held

    @property
    def free(self) -> int:
        return self.capacity - self.used

    @property
    def fraction(self) -> float:
        return self.used / self.capacity if self.capacity else 0.0


def rows_per_slab(snap: PoolSnapshot) -> int:
    """Rows in one cell of the grid: a slab (slab design) or a grow chunk (monolithic)."""
    return max(1, snap.chunk_rows)


def slab_cells(snap: PoolSnapshot, layer: LayerSnapshot) -> list[SlabCell]:
    """Per-slab occupancy of one layer (needs a full snapshot: per-row arrays; every layer holds the snapshot's
    rows)."""
    per = rows_per_slab(snap)
    cells = [SlabCell(per) for _ in range(layer.num_chunks)]
    live, shared, free = RowState.LIVE, RowState.SHARED, RowState.FREE
    for row, state in enumerate(map(row_state, snap.row_owner or [], snap.row_refcount or [])):
        if state is free:
            continue
        slab = row // per
        if slab >= len(cells):
            cells.extend(SlabCell(per) for _ in range(slab + 1 - len(cells)))
        cell = cells[slab]
        if state is live:
            cell.live += 1
        elif state is shared:
            cell.shared += 1
        else:
            cell.held += 1
    return cells


@dataclass
class PoolTotals:
    """Totals over every layer of one snapshot."""

    slabs: int
    live_rows: int
    shared_rows: int
    held_rows: int
    free_rows: int
    bytes_reserved: int
    bytes_in_use: int


def pool_totals(snap: PoolSnapshot) -> PoolTotals:
    """Slabs, rows by state and bytes over all layers of ``snap`` (every layer holds the same rows: one layer's
    cells, times the layers)."""
    cells = slab_cells(snap, snap.layers[0]) if snap.layers else []
    layers = len(snap.layers)
    return PoolTotals(len(cells) * layers, sum(c.live for c in cells) * layers, sum(c.shared for c in cells) * layers,
                      sum(c.held for c in cells) * layers, sum(c.free for c in cells) * layers,
                      snap.stats.bytes_reserved, snap.stats.bytes_in_use)


def free_runs(snap: PoolSnapshot) -> list[tuple[int, int]]:
    """Maximal runs of free rows as (first_row, length), over the whole capacity (``pool.free_rows``; every layer
    holds these rows)."""
    owners, refs = snap.row_owner or [], snap.row_refcount or []
    capacity = snap.layers[0].capacity_rows if snap.layers else 0
    free = [row for row, (owner, ref) in enumerate(zip(owners, refs)) if row_state(owner, ref) is RowState.FREE]
    return pool_free_runs(free, len(owners), max(capacity, len(owners)))


def gather_runs(rows: list[int], per_slab: int) -> list[tuple[int, int]]:
    """A sequence's rows (logical order) split into maximal same-slab runs: (slab, number of rows) per run."""
    return [(slab, len(local)) for slab, local in split_runs(rows, lambda row: divmod(row, per_slab))]


def runs_per_sequence(snap: PoolSnapshot) -> dict[int, int]:
    """Same-slab runs of each sequence's rows (every layer's; the monolithic design's one tensor is one run)."""
    return {seq: table_runs(rows, snap.design, snap.slab_blocks) for seq, rows in (snap.seq_rows or {}).items()}


def next_request_need(snap: PoolSnapshot, model: SessionModel | None = None) -> int:
    """Blocks the next request needs: the scenario's announced size when the run says it, else the longest live
    sequence's block count (a request like the biggest one now)."""
    block = max(1, snap.block_size)
    tokens = model.meta.get("next_request_tokens") if model is not None else None
    if isinstance(tokens, int) and tokens > 0:
        return math.ceil(tokens / block)
    lengths = [len(rows) for rows in (snap.seq_rows or {}).values()]
    return max(lengths, default=1) or 1


def accounting(model: SessionModel, sample_index: int) -> list[AccountingPart]:
    """The accounting split (``probes.sampler.accounting_parts``) of sample ``sample_index - 1``: the last sample
    at or before the cursor (nothing before the first sample)."""
    n = len(model.samples)
    if sample_index <= 0 or not n:
        return []
    sample = model.samples.at(min(sample_index, n) - 1)
    return accounting_parts(sample, discrete=memory_model_of(model.meta) == "discrete")


@dataclass
class FreeRunOrigin:
    """Who last held a free run and when it was freed. ``seq`` None: no kept snapshot shows it in use."""

    seq: int | None
    last_owned: float | None  # latest snapshot time showing the rows in use
    seen_free: float | None  # earliest later time known free (a snapshot, or the inspected moment)
    op: str = ""  # the freeing op from the op log ("release", "trim", "detach"), '' when unknown
    op_t: float | None = None  # its exact time

    def describe(self) -> str:
        if self.seq is None:
            return "never used in the kept history (reserved capacity not yet minted, or freed before it)"
        if self.op and self.op_t is not None:
            return f"freed by seq {self.seq}'s {self.op} at {self.op_t:.2f}s"
        return f"last owned by seq {self.seq} at {self.last_owned:.2f}s, free by {self.seen_free:.2f}s"


def free_run_origin(model: SessionModel, layer_index: int, first_row: int, length: int,
                    before: float | None) -> FreeRunOrigin:
    """Which sequence last owned rows [first_row, first_row+length) of a layer and when it freed them: walks the
    session's snapshots backwards from ``before`` (the inspected moment) to the last one where a row was in use
    (each one rebuilt in full only when reached), then looks the freeing op up in the op log between that
    snapshot and the moment the rows were seen free."""
    rows = set(range(first_row, first_row + length))
    seen_free = before
    for record in reversed(model.history(before, limit=HISTORY_LIMIT)):
        snap = model.snapshot_at(record.t)
        if snap is None or layer_index >= len(snap.layers):
            continue
        owners = snap.row_owner or []  # every layer holds the same rows
        holders = [owners[r] for r in rows if r < len(owners) and owners[r] >= 0]
        if holders:
            seq = max(set(holders), key=holders.count)
            op, op_t = _freeing_op(model, seq, record.t, seen_free)
            return FreeRunOrigin(seq, record.t, seen_free if seen_free is not None else record.t, op, op_t)
        seen_free = record.t
    return FreeRunOrigin(None, None, None)


def _freeing_op(model: SessionModel, seq: int, after: float, until: float | None) -> tuple[str, float | None]:
    """The op that released ``seq``'s rows in [after, until], from the op log ('' when not found)."""
    for entry in model.ops_between(after, until):
        if isinstance(entry.op, (Release, Trim, Detach)) and entry.op.seq == seq:
            return entry.op.name, entry.t
    return "", None



@dataclass
class ShrinkSoFar:
    """What a session's shrink points gave back up to an instant: the ``Shrunk`` events' sums (``ShrinkTally``,
    the run summary's own arithmetic) and the latest of them."""

    tally: ShrinkTally
    last: Shrunk | None = None


def shrink_so_far(model: SessionModel, until: float | None) -> ShrinkSoFar:
    """The session's ``Shrunk`` events at or before ``until`` (None: all), summed, and the latest of them."""
    events = model.events_of(Shrunk)
    upto = len(events) if until is None else bisect.bisect_right(events, until, key=lambda e: e.t)
    tally = ShrinkTally()
    tally.add_events(events[:upto])
    return ShrinkSoFar(tally, events[upto - 1] if upto else None)
