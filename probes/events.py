"""What a worker streams and a recording stores: one frozen, typed record per event (mlx-free).

Every item is an ``Event``: ``t`` (``time.monotonic()`` on the wire; seconds since the session start in the read
model and in files), and the workload's ``step`` and ``tokens`` counters when it happened. Items are ``msgspec``
Structs tagged by ``kind``, so a batch encodes to bytes and decodes back with one typed, validated decoder
(``probes.transport``, ``probes.codec``); code matches on types, never on strings.

Families:

* ``TimelineEvent``: what the workload and the probes report over time (phases, steps, gather runs, fused
  decisions, logs, errors, drops, probe cost). Recorded in EVENTS records; the read model keeps them per type
  (``SessionModel.events_of(Step)``).
* Stream items with a record kind of their own: ``Sample`` (SAMPLES, columnar), ``OpBatch`` (OPS),
  ``SnapshotTaken`` (SNAPSHOTS and KEYFRAME), ``Done`` (END), ``MetaUpdate`` (META, later updates in EVENTS).

Adding an event kind: subclass ``TimelineEvent`` here with a new tag and its fields; it is encoded, decoded,
recorded and replayed with no other change, and a view reads it with ``model.events_of(NewKind)``. Adding a field:
give it a default (older recordings lack it); use ``None`` for "not recorded" rather than a made-up 0.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec

from pool import AnyOp, BookState, PoolSnapshot, ShrinkReport


class Event(msgspec.Struct, frozen=True, tag_field="kind", kw_only=True):
    """Base of every streamed item; ``event.kind`` is its tag. ``t == 0.0`` on the wire means "not stamped yet"
    (the probes stamp it with the time and counters of the moment they receive it)."""

    t: float = 0.0
    step: int = 0
    tokens: int = 0

    @property
    def kind(self) -> str:
        return type(self).__struct_config__.tag


class TimelineEvent(Event, frozen=True, kw_only=True):
    """An event the read model keeps on the session's timeline (EVENTS records)."""


# ---- timeline events -----------------------------------------------------------------------------------------
class PhaseEdge(TimelineEvent, tag="phase"):
    """A scenario phase starts or ends."""

    name: str
    edge: Literal["start", "end"]


class Step(TimelineEvent, tag="step"):
    """One forward pass: ``num_tokens`` tokens for ``batch`` sequences in ``wall_s`` seconds."""

    phase: str
    type: Literal["prefill", "decode"]
    batch: int
    num_tokens: int
    wall_s: float


class GatherRuns(TimelineEvent, tag="gather"):
    """Same-slab runs per sequence of one decode step (``runs_layer0[i]``, ``runs_max[i]`` belong to
    ``seq_ids[i]``): in layer 0 and the maximum over layers; ``fused_layers`` ran on the fused kernel."""

    seq_ids: list[int]
    runs_layer0: list[int]
    runs_max: list[int]
    fused_layers: int = 0


class FusedChange(TimelineEvent, tag="fused"):
    """A layer's fused paged-decode decision changed (pool/fused_decision.py lists the reasons)."""

    layer: int
    use_fused: bool
    reason: str


class PrefillRouteChange(TimelineEvent, tag="prefill_route"):
    """The prefill attention route changed (pool/prefill_decision.py lists the reasons): ``use_paged`` when the
    chunk read its history in place, else gathered; one decision serves every layer of a chunk."""

    seq_id: int
    use_paged: bool
    reason: str
    history_pieces: int = 0


class LogLine(TimelineEvent, tag="log"):
    text: str


class WorkerError(TimelineEvent, tag="error"):
    """The run failed: an exception in the worker, or (``origin="parent"``) a death the parent observed."""

    text: str
    traceback: str = ""
    origin: Literal["worker", "parent"] = "worker"


class Dropped(TimelineEvent, tag="dropped"):
    """Batches (and their events) the live transport dropped so far; the recording always has everything."""

    batches: int
    events: int


class RequestDone(TimelineEvent, tag="request_done"):
    """A request finished: ``prompt_tokens`` of prompt (``shared_tokens`` of them taken from kept or cached K/V
    instead of computed) and ``generated_tokens`` sampled; ``finish_reason`` why (a server's requests: "length",
    "stop", "disconnected", ...; None in recordings of scenario runs made before it was recorded). ``seq_id`` is -1
    for a request that ended before it got a sequence (a server's request cancelled while it waited)."""

    req_id: int
    seq_id: int
    prompt_tokens: int
    generated_tokens: int
    shared_tokens: int = 0
    finish_reason: str | None = None


class RequestArrived(TimelineEvent, tag="request_arrived"):
    """A server accepted a request (``slabscope serve``): ``prompt_tokens`` to prefill, at most ``max_tokens`` to
    generate; ``waiting`` and ``running`` are the queue and the batch just after it joined the queue."""

    req_id: int
    prompt_tokens: int
    max_tokens: int
    waiting: int = 0
    running: int = 0


class ClockSync(TimelineEvent, tag="clock"):
    """A rank of a distributed run measured its clock against rank 0's at a sync point (``reason``: "phase",
    "step" or "end"): ``offset_s`` exact within ``bound_s``; ``residual_s`` is how far it moved since the start."""

    reason: str
    offset_s: float
    bound_s: float = 0.0
    residual_s: float = 0.0


class Shrunk(TimelineEvent, tag="shrink"):
    """A shrink point gave memory back (pool/shrink_types.py): ``report`` is what the pool did and measured (blocks
    moved, bytes moved, slabs and bytes released, MLX cache trimmed, seconds, and MLX's active + cache around it:
    ``report.reclaimed`` is what the process footprint really fell by)."""

    report: ShrinkReport


class RunStage(TimelineEvent, tag="stage"):
    """Where a run is before its first phase, said at once (not held until the probes start) so a user waiting on
    a live run sees it: "loading model" (``detail``: importing MLX, then the model's name), "rehearsal" (the
    load-time rehearsal, app/workloads/rehearsal.py). Phases follow as ``PhaseEdge`` events (probes/progress.py
    folds them all)."""

    stage: str
    detail: str = ""


class ProbeOverhead(msgspec.Struct, frozen=True):
    """What the probes measured of their own cost (probes/live.py)."""

    wall_s: float = 0.0
    probe_thread_cpu_s: float = 0.0
    workload_thread_s: float = 0.0
    cost_fraction: float = 0.0
    samples: int = 0
    sample_cost_us_mean: float = 0.0
    snapshots: int = 0
    snapshot_cost_ms_mean: float = 0.0
    dropped_batches: int = 0


class ProbeStats(TimelineEvent, tag="probe_stats"):
    overhead: ProbeOverhead


# ---- items with their own record kinds ----------------------------------------------------------------------
class Sample(Event, tag="sample"):
    """One memory sample (bytes; probes/sampler.py says what each figure is and how it is measured).

    The accounting parts (``weights``, ``pool_live``, ``pool_free``, ``other_active``, ``cache``, signed) sum to
    ``footprint = active + cache``; ``rss_other`` is the RSS MLX does not explain."""

    active: int
    cache: int
    footprint: int
    peak: int
    footprint_max: int
    rss: int
    rss_max: int
    sys_available: int
    weights: int
    pool_live: int
    pool_free: int
    other_active: int
    rss_other: int
    cost_us: float
    pool_slabs: int | None = None  # slabs (monolithic: 32-block chunks) over layers; None: not recorded (older)


class OpBatch(Event, tag="op"):
    """Consecutive pool ops, ``op_t[i]`` the time of ``ops[i]``."""

    ops: list[AnyOp]
    op_t: list[float]


class SnapshotTaken(Event, tag="snapshot"):
    """A pool snapshot (full on the wire). A keyframe also carries the bookkeeping state, from which any later
    instant is rebuilt with the op log."""

    snapshot: PoolSnapshot
    keyframe: bool = False
    book_state: BookState | None = None


class Done(Event, tag="done"):
    """The run ended; ``summary`` is the workload's result (app/workloads/runner.py) plus ``probe_overhead``."""

    summary: dict[str, Any]


class MetaUpdate(Event, tag="meta"):
    """Session metadata (versions, device, model, scenario, pool geometry, ...): the first one opens the stream;
    later ones add keys."""

    meta: dict[str, Any]


def _leaves(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += _leaves(sub) if sub.__subclasses__() else [sub]
    return out


def event_types() -> tuple[type[Event], ...]:
    """Every concrete event type (found by subclassing: a new kind needs no registration)."""
    return tuple(_leaves(Event))


def timeline_types() -> tuple[type[TimelineEvent], ...]:
    return tuple(_leaves(TimelineEvent))


def any_event():
    """The union type a decoder of mixed events decodes to."""
    return Union[event_types()]


def rebased(event: Event, t0: float) -> Event:
    """The same event with ``t`` relative to ``t0``."""
    return msgspec.structs.replace(event, t=event.t - t0)
