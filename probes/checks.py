"""Checks on a decoded record's content that the types cannot express, in one place (mlx-free).

``probes.codec.decode`` turns a payload into typed records (msgspec validates types and required fields); this
module then checks what a type cannot say: every time is a session time (finite, in [0, ``MAX_SESSION_S``]) and
the record's header time is its first item's; floats are finite (a NaN compares false and passes every gate);
sample columns are complete and aligned; op numbers and ``op_index`` are counts (>= 0); event lists that belong
together have one length; and every size a record could make a reader act on (layers, rows, row arrays, a
keyframe's book) is within ``probes.limits`` before anything is built from it. The META and END blocks slabscope
reads are checked by ``probes.block_checks``. A failed check raises ``ValueError`` with what is wrong;
``codec.decode`` turns it into the one-line ``RecordingError``.
"""

from __future__ import annotations

import math
from itertools import chain

import msgspec

from pool import BookState, PoolSnapshot
from pool.config import DESIGNS, MAX_DIMENSION
from probes import bounds
from probes import format as fmt
from probes import limits
from probes.events import GatherRuns, Sample

SAMPLE_FIELDS = Sample.__struct_fields__
SAMPLE_DEFAULTS = {f.name: f.default for f in msgspec.structs.fields(Sample)}  # read once: fields() is slow
# t/step/tokens have defaults on the wire (the probes stamp them) but every recorded sample has them
REQUIRED_SAMPLE_FIELDS = {f.name for f in msgspec.structs.fields(Sample) if f.required} | {"t", "step", "tokens"}
_NOT_NONE_SAMPLE_FIELDS = [name for name in SAMPLE_FIELDS if SAMPLE_DEFAULTS[name] is not None]
_NOT_NONE = frozenset(_NOT_NONE_SAMPLE_FIELDS)
_FLOAT_FIELDS: dict[type, tuple[str, ...]] = {}  # event type -> its float fields besides t


def check_time(t, what: str) -> None:
    problem = limits.time_problem(t)
    if problem is not None:
        raise ValueError(f"{what}: {problem}")


def check_finite(values: list, what: str) -> None:
    """Every number of ``values`` is finite (one C-level sum: a NaN or an infinity makes it non-finite; no real
    figure is near 1e308)."""
    try:
        total = sum(values)
    except OverflowError:  # an int past float range (v1 JSON): not a figure a probe measures
        total = math.inf
    if not math.isfinite(total):
        raise ValueError(f"{what} is not finite")


def _finite_column(values: list) -> bool:
    return all(not isinstance(x, float) or math.isfinite(x) for x in values if x is not None) and \
        all(abs(x) < 1e308 for x in values if x is not None)


def check_times(times: list, what: str) -> None:
    """Session times: finite, in order, the first and the last within range."""
    if times:
        check_finite(times, f"{what}'s time")
        if any(b < a for a, b in zip(times, times[1:])):
            raise ValueError(f"{what}s out of time order")
        check_time(times[0], what)
        check_time(times[-1], what)


def check_header_time(header_t: float, first_t: float) -> None:
    """A record's header time is the time of its first item (readers index records by it without decoding)."""
    if header_t != first_t:
        raise ValueError(f"the record header says t={header_t!r} but its first item is at t={first_t!r}")


def check_count(value: int, what: str, most: int = limits.MAX_OPS) -> None:
    if not 0 <= value <= most:
        raise ValueError(f"{what} {value} is outside [0, {most}]")


# ---- samples ---------------------------------------------------------------------------------------------------
def complete_columns(columns: dict[str, list]) -> dict[str, list]:
    """Sample columns complete (a column an older writer did not have takes its field's default), aligned, with
    finite, possible numbers and session times in order. (Opening a long session runs this once per SAMPLES
    record: the figures are checked in one flat pass.)"""
    present = [name for name in SAMPLE_FIELDS if name in columns]
    missing = [name for name in SAMPLE_FIELDS if name not in columns and name in REQUIRED_SAMPLE_FIELDS]
    if missing:
        raise ValueError(f"sample columns {missing} missing")
    rows = len(columns["t"])
    if any(len(columns[name]) != rows for name in present):
        raise ValueError("sample columns of different lengths")
    figures = list(chain.from_iterable(columns[name] for name in present if name in _NOT_NONE))
    if None in figures:
        raise ValueError("a sample figure that is always recorded is null")
    figures += [x for name in present if name not in _NOT_NONE for x in columns[name] if x is not None]
    try:  # magnitudes summed: a NaN or an infinity propagates; the column is named on failure only
        total = sum(map(abs, figures))
    except OverflowError:
        total = math.inf
    if not math.isfinite(total):
        bad = next(name for name in present if not _finite_column(columns[name]))
        raise ValueError(f"a sample's {bad} is not finite")
    check_times(columns["t"], "sample")
    return {name: columns[name] if name in columns else [SAMPLE_DEFAULTS[name]] * rows for name in SAMPLE_FIELDS}


# ---- events ----------------------------------------------------------------------------------------------------
def check_events(events: list) -> None:
    """Times, every event's float fields, and what a step's figures and a gather's lists must be (one pass over
    the events with few calls: a long session holds tens of thousands of steps)."""
    if not events:
        return
    times = [e.t for e in events]
    check_finite(times, "an event's time")
    check_time(min(times), "an event")
    check_time(max(times), "an event")
    check_finite([getattr(e, name) for e in events for name in _float_fields(type(e))], "an event's figure")
    if any(not len(e.seq_ids) == len(e.runs_layer0) == len(e.runs_max) for e in events if type(e) is GatherRuns):
        raise ValueError("a gather event's sequence and run lists differ in length")


def _float_fields(cls: type) -> tuple[str, ...]:
    names = _FLOAT_FIELDS.get(cls)
    if names is None:
        names = _FLOAT_FIELDS[cls] = tuple(f.name for f in msgspec.structs.fields(cls)
                                           if f.type is float and f.name != "t")
    return names


# ---- ops -------------------------------------------------------------------------------------------------------
def check_ops(record) -> None:
    """An OPS record: one time per op, session times in order, a first op number that is a count."""
    if len(record.t) != len(record.ops):
        raise ValueError(f"{len(record.ops)} ops with {len(record.t)} times")
    check_count(record.first, "first op number")
    check_times(record.t, "op")


# ---- snapshots and keyframes -----------------------------------------------------------------------------------
def check_snapshot_record(record, full: bool) -> None:
    """A snapshot (summary, or ``full`` with its row arrays) and its stamp."""
    check_time(record.t, "a snapshot")
    check_count(record.op_index, "op_index")
    check_snapshot(record.snapshot, full)


def check_snapshot(snap: PoolSnapshot, full: bool) -> None:
    if snap.design not in DESIGNS:
        raise ValueError(f"unknown pool design {snap.design!r}")
    check_count(snap.num_layers, "num_layers", limits.MAX_LAYERS)
    if snap.num_layers != len(snap.layers):
        raise ValueError(f"a snapshot of {snap.num_layers} layers lists {len(snap.layers)}")
    for name in ("block_size", "slab_blocks"):
        if not 1 <= getattr(snap, name) <= MAX_DIMENSION:
            raise ValueError(f"snapshot {name} {getattr(snap, name)} is outside [1, {MAX_DIMENSION}]")
    for layer in snap.layers:
        if not math.isfinite(layer.fragmentation):
            raise ValueError("a layer's fragmentation is not finite")
    if full:
        _check_rows(snap)


def _check_rows(snap: PoolSnapshot) -> None:
    """A full snapshot's row arrays: every layer of one capacity (one row space), one entry per row of it, within
    the replay bound."""
    capacity = snap.layers[0].capacity_rows if snap.layers else 0
    if any(layer.capacity_rows != capacity for layer in snap.layers):
        raise ValueError("layers of different capacities (every layer holds the same rows)")
    rows = capacity * len(snap.layers)
    if rows > limits.max_replay_rows():
        raise ValueError(f"{rows:,} pool rows, over the {limits.max_replay_rows():,} a reader holds "
                         "(SLABSCOPE_MAX_REPLAY_ROWS)")
    if snap.row_owner is None or snap.row_refcount is None:
        raise ValueError("a full snapshot without its row arrays")
    if not len(snap.row_owner) == len(snap.row_refcount) == capacity:
        raise ValueError(f"row arrays of {len(snap.row_owner)} and {len(snap.row_refcount)} entries for "
                         f"{capacity} rows")
    for rows_of_seq in (snap.seq_rows or {}).values():
        if any(not 0 <= row < capacity for row in rows_of_seq):
            raise ValueError("a sequence row outside the capacity")


def check_book_state(state: BookState) -> None:
    """Sizes a keyframe's bookkeeping state asks a replay to hold (its invariants are checked when restored)."""
    cfg = state.config
    check_count(cfg.num_layers, "book num_layers", limits.MAX_LAYERS)
    per_layer = limits.rows_per_layer(cfg.num_layers)
    for name in ("block_size", "slab_blocks"):
        if not 1 <= getattr(cfg, name) <= MAX_DIMENSION:
            raise ValueError(f"book {name} {getattr(cfg, name)} is outside [1, {MAX_DIMENSION}]")
    if cfg.slab_blocks > per_layer or state.rows.capacity > per_layer or len(state.rows.row_block) > per_layer:
        raise ValueError(f"a book of more than {per_layer:,} rows per layer over {cfg.num_layers} layers, over the "
                         f"{limits.max_replay_rows():,} a replay holds (SLABSCOPE_MAX_REPLAY_ROWS)")


# ---- per record kind -------------------------------------------------------------------------------------------
def check_record(kind: int, payload, header_t: float, figure_bounds: bounds.FigureBounds = bounds.DEFAULT_BOUNDS):
    """``payload`` (a decoded SAMPLES, EVENTS, OPS, SNAPSHOTS or KEYFRAME record) checked; returns it (sample
    columns completed). The header time of the kinds readers order and index by time must equal the first item's.
    Malformed content raises ``ValueError``; then every figure is held to its physical bound (``probes.bounds``,
    ``figure_bounds``: the session's), an ``ImpossibleValue`` otherwise. META and END: ``probes.block_checks``."""
    first_t = None
    if kind == fmt.SAMPLES:
        payload = type(payload)(complete_columns(payload.columns))
        bounds.check_sample_columns(payload.columns, figure_bounds)
        first_t = payload.columns["t"][0] if payload.columns["t"] else None
    elif kind == fmt.EVENTS:  # not indexed by time (all read at open), and a newer kind may come first
        check_events(payload.events)
        bounds.check_event_figures(payload.events, figure_bounds)
    elif kind == fmt.OPS:
        check_ops(payload)
        bounds.check_op_figures(payload.ops, figure_bounds)
        first_t = payload.t[0] if payload.t else None
    elif kind == fmt.SNAPSHOTS:
        for record in payload:
            check_snapshot_record(record, full=False)
        if any(b.t < a.t or b.op_index < a.op_index for a, b in zip(payload, payload[1:])):
            raise ValueError("snapshots out of time or op order")
        bounds.check_snapshot_figures([record.snapshot for record in payload], figure_bounds)
        first_t = payload[0].t if payload else None
    elif kind == fmt.KEYFRAME:
        check_snapshot_record(payload, full=True)
        if payload.book_state is not None:
            check_book_state(payload.book_state)
        bounds.check_snapshot_figures([payload.snapshot], figure_bounds)
        first_t = payload.t
    if first_t is not None:
        check_header_time(header_t, first_t)
    return payload
