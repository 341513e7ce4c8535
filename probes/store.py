"""The one read model of a session: live runs and recordings answer the same queries (mlx-free).

``SessionModel`` holds a session as typed records: memory samples as columns (``probes.columns``), timeline events
(kept per type: ``events_of(Step)``), pool snapshot summaries, keyframes (full snapshot + bookkeeping state), the
op log and the end summary. A live run feeds it with ``append(event)`` (worker events, ``time.monotonic()``
stamps); a recording fills the same lists when it is opened (``probes.replay.Session``). The TUI, the report,
compare and what-if all read sessions through it, so a figure (the peak, the phase at an instant, the pool at an
instant) is computed in one place.

Times are seconds since the session start (``meta["t_start"]``, the worker's first stamp). Threads: one writer (the
thread that appends) and any number of readers; lists only grow (or are replaced whole when thinned), and sample
rows become visible only once complete.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections import OrderedDict
from typing import Callable, Iterator, NamedTuple

import msgspec

from pool import Op, PoolConfig, PoolSnapshot
from probes.block_checks import check_meta_geometry
from probes.codec import KeyframeRecord, Meta, SnapshotRecord, meta_of
from probes.columns import SampleColumns
from probes.events import (Done, Dropped, Event, MetaUpdate, OpBatch, PhaseEdge, ProbeOverhead, ProbeStats, RunStage,
                           Sample, SnapshotTaken, Step, TimelineEvent, WorkerError, rebased)
from probes.progress import RunProgress

MAX_SUMMARIES = 2400     # live snapshot summaries kept before the older half is thinned (every other dropped)
RECENT_FULL = 32         # live full snapshots kept (the view following a live run needs no rebuild)
REBUILT_CACHE = 256      # rebuilt full snapshots kept per session


class PhaseSpan(msgspec.Struct, frozen=True):
    name: str
    start: float
    end: float | None = None  # None while the phase runs


class Frame(msgspec.Struct, frozen=True):
    """A session at instant ``t``: the latest sample and pool-snapshot summary at or before ``t``."""

    t: float
    step: int
    tokens: int
    phase: str | None
    sample: Sample | None
    snapshot: PoolSnapshot | None  # a summary (no per-row arrays); ``snapshot_at(t)`` gives the full pool


class Peak(msgspec.Struct, frozen=True):
    """A peak with what it is: ``label`` is "max since start" or "max in window [a, b] s"."""

    value: float
    t: float | None
    label: str


class OpEntry(NamedTuple):
    i: int      # op number from 0 over the session
    t: float
    op: Op


class Keyframe:
    """Index entry of a full pool snapshot at ``t``; ``load()`` returns its ``KeyframeRecord`` (decoded and its
    bookkeeping state validated on first use, then cached)."""

    __slots__ = ("t", "_loader", "_value")

    def __init__(self, t: float, loader: Callable[[], KeyframeRecord]) -> None:
        self.t = t
        self._loader = loader
        self._value: KeyframeRecord | None = None

    @classmethod
    def loaded(cls, record: KeyframeRecord) -> "Keyframe":
        keyframe = cls(record.t, lambda: record)
        keyframe._value = record
        return keyframe

    def load(self) -> KeyframeRecord:
        if self._value is None:
            self._value = self._loader()
        return self._value

    @property
    def is_loaded(self) -> bool:
        return self._value is not None


class SessionModel:
    """One backend run (see the module docstring). ``label`` names it on screen; ``source`` is "live" or a path."""

    def __init__(self, label: str = "", source: str = "live", keyframe_interval_s: float = 10.0,
                 max_keyframes: int = 360) -> None:
        self.label = label
        self.source = source
        self.meta: dict = {}
        self.summary: Done | None = None  # ``t`` relative
        self.samples = SampleColumns()
        self.events: list[TimelineEvent] = []
        self.snapshots: list[SnapshotRecord] = []  # summaries, time-ordered
        self.keyframes: list[Keyframe] = []
        self.skipped_events: dict[str, int] = {}
        self.damage = None  # probes.damage.Damage: a recording read up to damage in its file (probes.replay.Session)
        self.received = 0  # items appended (live)
        self.progress = RunProgress()  # where the run is (stage, phase, requests, ETA): fed as the model fills
        self.stop_requested = False  # someone asked this run to stop (the TUI's x): its end reads "stopped"
        self._meta = Meta()
        self._t_start: float | None = None
        self._by_type: dict[type, list] = {}
        self._ops: list[Op] = []
        self._op_t: list[float] = []
        self._recent: OrderedDict[float, PoolSnapshot] = OrderedDict()  # live full snapshots by time
        self._rebuilt: OrderedDict[float, tuple[tuple, PoolSnapshot | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._keyframe_interval_s = keyframe_interval_s
        self._max_keyframes = max_keyframes
        self._cursor = 0.0
        self._rebuilder = None

    # ---- feeding (live) --------------------------------------------------------------------------------------
    def append(self, item: Event) -> None:
        """Fold one worker event (absolute ``time.monotonic()`` stamps) into the model."""
        self.received += 1
        if isinstance(item, MetaUpdate):
            self._add_meta(item)
            return
        if isinstance(item, RunStage) and self._t_start is None:  # said before the session's clock starts
            self.add_event(msgspec.structs.replace(item, t=0.0))
            return
        t0 = self._clock(item.t)
        match item:
            case Sample():
                self.samples.append(item, item.t - t0)
            case OpBatch(ops=ops, op_t=times):
                self._op_t.extend(t - t0 for t in times)
                self._ops.extend(ops)
            case SnapshotTaken():
                self._add_snapshot(item, item.t - t0)
            case Done():
                self.summary = rebased(item, t0)
                self.progress.fold(self.summary)
            case _:
                self.add_event(rebased(item, t0))
                return
        self.progress.advance(item.t - t0, item.tokens)

    def _clock(self, t: float) -> float:
        if self._t_start is None:
            self._t_start = float(t)
        return self._t_start

    def _add_meta(self, item: MetaUpdate) -> None:
        if not self.meta:
            self._t_start = float(item.meta.get("t_start", item.t))
        self.set_meta(dict(self.meta, **item.meta))

    def set_meta(self, meta: dict) -> None:
        self._meta = meta_of(meta)
        self.meta = meta
        self.progress.fold(MetaUpdate(t=self.progress.last_t or 0.0, meta=meta))

    def add_event(self, event: TimelineEvent) -> None:
        """A timeline event with a relative ``t`` (late metadata merges into ``meta``)."""
        if isinstance(event, MetaUpdate):
            self.set_meta(dict(self.meta, **event.meta))
            return
        self.events.append(event)
        self._by_type.setdefault(type(event), []).append(event)
        self.progress.fold(event)

    def _add_snapshot(self, item: SnapshotTaken, t: float) -> None:
        snap = item.snapshot
        record = SnapshotRecord(t, item.step, item.tokens, len(self._ops), snap.summary())
        with self._lock:
            self.snapshots.append(record)
            if len(self.snapshots) > MAX_SUMMARIES:
                half = len(self.snapshots) // 2
                self.snapshots = self.snapshots[:half:2] + self.snapshots[half:]
            if snap.has_rows:
                self._recent[t] = snap
                while len(self._recent) > RECENT_FULL:
                    self._recent.popitem(last=False)
        last = self.keyframes[-1].t if self.keyframes else None
        due = item.keyframe or last is None or (item.book_state is None and t - last >= self._keyframe_interval_s)
        if due and snap.has_rows:
            self._add_keyframe(KeyframeRecord(t, item.step, item.tokens, record.op_index, snap, item.book_state))

    def _add_keyframe(self, record: KeyframeRecord) -> None:
        keyframes = self.keyframes + [Keyframe.loaded(record)]
        if len(keyframes) > self._max_keyframes:
            thinned = keyframes[::2]
            if thinned[-1] is not keyframes[-1]:
                thinned.append(keyframes[-1])
            keyframes = thinned
        self.keyframes = keyframes

    def fail(self, text: str, traceback: str = "") -> None:
        """Record a failure the parent observed (a worker that died or could not start); the first error wins."""
        if self.error is None:
            self.add_event(WorkerError(t=self.duration, step=-1, tokens=-1, text=text or "worker failed",
                                       traceback=traceback, origin="parent"))

    # ---- identity and status ---------------------------------------------------------------------------------
    @property
    def session_id(self) -> str | None:
        return self._meta.session_id

    @property
    def geometry(self) -> PoolConfig | None:
        """The pool's configuration (None: no pool). v1 recordings had no ``geometry`` entry: their ``pool`` entry
        (when it names the layers) or their first snapshot summary says it (decoded at open: asking never decodes
        anything lazily, so it cannot fail)."""
        if self._meta.geometry is not None:
            return self._meta.geometry
        pool = self.meta.get("pool")
        if isinstance(pool, dict) and pool.get("num_layers") and pool.get("design"):
            try:
                geometry = msgspec.convert({k: pool[k] for k in PoolConfig.__struct_fields__ if k in pool},
                                           PoolConfig)
                check_meta_geometry(geometry)
                return geometry
            except (msgspec.ValidationError, ValueError):
                pass  # a malformed v1 ``pool`` entry: the snapshots say it
        if self.snapshots:
            snap = self.snapshots[0].snapshot
            return PoolConfig(snap.num_layers, snap.block_size, snap.slab_blocks, snap.design)
        return None

    @property
    def is_pool(self) -> bool:
        return bool(self.snapshots) or self.geometry is not None

    @property
    def error(self) -> WorkerError | None:
        errors = self._by_type.get(WorkerError)
        return errors[0] if errors else None

    @property
    def complete(self) -> bool:
        """True when the worker closed the session normally (a "done" event / END record)."""
        return self.summary is not None

    @property
    def stopped(self) -> bool:
        """The run ended because it was asked to: its summary says ``cancelled``, or it was asked to stop
        (``stop_requested``) and then ended, reporting or ended from outside (the parent's death report)."""
        if self.summary is not None and self.summary.summary.get("cancelled"):
            return True
        error = self.error
        return self.stop_requested and (self.complete or (error is not None and error.origin == "parent"))

    @property
    def status(self) -> str:
        """'stopped', 'error', 'done', 'running' or 'waiting' (nothing received yet)."""
        if self.stopped:
            return "stopped"
        if self.error is not None:
            return "error"
        if self.complete:
            return "done"
        return "running" if self.received or self.source != "live" else "waiting"

    @property
    def overhead(self) -> ProbeOverhead | None:
        """The probes' measured cost: the END summary's figure, else the latest periodic one."""
        if self.summary is not None and isinstance(self.summary.summary.get("probe_overhead"), dict):
            return msgspec.convert(self.summary.summary["probe_overhead"], ProbeOverhead)
        stats = self._by_type.get(ProbeStats)
        return stats[-1].overhead if stats else None

    @property
    def dropped_batches(self) -> int:
        drops = self._by_type.get(Dropped)
        return max((d.batches for d in drops), default=0) if drops else 0

    # ---- time ------------------------------------------------------------------------------------------------
    @property
    def duration(self) -> float:
        """Seconds from the start to the last thing known."""
        ends = [0.0]
        n = len(self.samples)
        if n:
            ends.append(self.samples.window(n).t[-1])
        for seq in (self.events, self.snapshots):
            if seq:
                ends.append(seq[-1].t)
        if self.summary is not None:
            ends.append(self.summary.t)
        return max(ends)

    def events_of(self, kind: type) -> list:
        """The timeline events of one type, in order (the list grows while a live run goes on)."""
        return self._by_type.get(kind, [])

    def events_between(self, t0: float, t1: float, kind: type | None = None) -> list:
        seq = self.events if kind is None else self.events_of(kind)
        lo = bisect.bisect_left(seq, t0, key=lambda e: e.t)
        hi = bisect.bisect_right(seq, t1, key=lambda e: e.t)
        return seq[lo:hi]

    def sample_index(self, t: float | None) -> int:
        """Number of samples at or before ``t`` (all for None)."""
        return self.samples.index_at(t)

    def sample_at(self, t: float) -> Sample | None:
        i = self.samples.index_at(t)
        return self.samples.at(i - 1) if i else None

    def phases(self) -> list[PhaseSpan]:
        """Phase spans from phase events (``end`` None while a phase runs)."""
        spans: list[PhaseSpan] = []
        for edge in self.events_of(PhaseEdge):
            if edge.edge == "start":
                spans.append(PhaseSpan(edge.name, edge.t))
                continue
            for i in range(len(spans) - 1, -1, -1):
                if spans[i].name == edge.name and spans[i].end is None:
                    spans[i] = PhaseSpan(edge.name, spans[i].start, edge.t)
                    break
        return spans

    def phase_at(self, t: float | None) -> str | None:
        """The phase running at ``t`` (the latest one for None)."""
        current = None
        for span in self.phases():
            if t is None or (span.start <= t and (span.end is None or t <= span.end)):
                current = span.name
        return current

    def time_of_step(self, step: int) -> float | None:
        """First time the workload's step counter reached ``step`` (from samples and step events)."""
        window = self.samples.window()
        i = bisect.bisect_left(window.step, step)
        candidates = [window.t[i]] if i < len(window) else []
        candidates += [e.t for e in self.events_of(Step) if e.step >= step][:1]
        return min(candidates) if candidates else None

    def frame_at(self, t: float) -> Frame:
        t = min(max(t, 0.0), self.duration)
        sample = self.sample_at(t)
        record = self.summary_at(t)
        counters = [x for x in (sample, record) if x is not None]
        step = max((x.step for x in counters), default=0)
        tokens = max((x.tokens for x in counters), default=0)
        return Frame(t, step, tokens, self.phase_at(t), sample, record.snapshot if record else None)

    def seek(self, t: float) -> Frame:
        """Move the cursor to ``t`` (either direction, clamped to the session) and return the frame there."""
        frame = self.frame_at(t)
        self._cursor = frame.t
        return frame

    @property
    def cursor(self) -> float:
        return self._cursor

    def iter_time(self, dt: float = 0.1, start: float = 0.0, stop: float | None = None) -> Iterator[Frame]:
        """Frames every ``dt`` seconds from ``start`` to ``stop`` (default: the end)."""
        stop = self.duration if stop is None else stop
        n = int((stop - start) / dt + 1e-9)
        for k in range(n + 1):
            yield self.frame_at(start + k * dt)

    def iter_steps(self) -> Iterator[Frame]:
        """One frame per workload step event (prefill/decode), at the step's time."""
        for event in list(self.events_of(Step)):
            yield self.frame_at(event.t)

    # ---- figures ---------------------------------------------------------------------------------------------
    def peak(self, field: str = "footprint", t0: float | None = None, t1: float | None = None) -> Peak:
        """Max of a sample field over the run ("max since start") or a window ("max in window [a, b] s")."""
        whole = t0 is None and t1 is None
        lo = 0.0 if t0 is None else t0
        hi = self.duration if t1 is None else t1
        label = "max since start" if whole else f"max in window [{lo:.2f}, {hi:.2f}] s"
        samples = self.samples  # searched in place: a window would copy the time and field columns per call
        start = 0 if whole else samples.index_before(lo)
        stop = samples.index_at(None if whole else hi)
        best = samples.argmax(field, start, stop)
        if best is None:
            return Peak(0.0, None, label)
        sample = samples.at(best)
        return Peak(float(getattr(sample, field)), sample.t, label)

    # ---- the op log ------------------------------------------------------------------------------------------
    def all_ops(self) -> list[OpEntry]:
        """Every pool op so far, numbered, in order."""
        return [OpEntry(i, t, op) for i, (t, op) in enumerate(zip(self._op_t[:len(self._ops)], self._ops))]

    def ops_range(self, op_index: int, t: float) -> list[OpEntry]:
        """Ops numbered ``op_index`` and later that happened at or before ``t``, in order."""
        times = self._op_t
        hi = bisect.bisect_right(times, t, lo=min(op_index, len(times)), hi=min(len(times), len(self._ops)))
        return [OpEntry(i, times[i], self._ops[i]) for i in range(op_index, hi)]

    def ops_between(self, t0: float, t1: float | None) -> list[OpEntry]:
        """Ops stamped in ``[t0, t1]`` (``t1`` None: up to now)."""
        times = self._op_t
        n = min(len(times), len(self._ops))
        lo = bisect.bisect_left(times, t0, 0, n)
        hi = n if t1 is None else bisect.bisect_right(times, t1, lo, n)
        return [OpEntry(i, times[i], self._ops[i]) for i in range(lo, hi)]

    def _ops_known(self) -> int:
        return len(self._ops)

    # ---- pool state ------------------------------------------------------------------------------------------
    def summary_at(self, t: float) -> SnapshotRecord | None:
        """The latest snapshot summary at or before ``t``."""
        snapshots = self.snapshots
        i = bisect.bisect_right(snapshots, t, key=lambda s: s.t)
        return snapshots[i - 1] if i else None

    def snapshot_times(self) -> list[float]:
        return [s.t for s in self.snapshots]

    def snapshot_at(self, t: float | None = None) -> PoolSnapshot | None:
        """The full pool snapshot in force at ``t`` (the latest one for None): exact, rebuilt from the nearest
        keyframe plus the op log (``probes.rebuild``) unless a full snapshot of that very state is at hand. None
        without a pool or before the first keyframe."""
        if t is None:
            with self._lock:
                if self._recent:
                    return next(reversed(self._recent.values()))
            t = self.duration
        exact = self._kept_full_at(t)
        if exact is not None:
            return exact
        stamp = (self._ops_known(), len(self.snapshots), len(self.keyframes))
        cached = self._rebuilt.get(t)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        snap = self._rebuild(t)
        self._rebuilt[t] = (stamp, snap)
        while len(self._rebuilt) > REBUILT_CACHE:
            self._rebuilt.popitem(last=False)
        return snap

    def _kept_full_at(self, t: float) -> PoolSnapshot | None:
        """A kept full snapshot that is the pool at ``t``: the latest snapshot at or before ``t`` with no op between
        it and ``t``."""
        record = self.summary_at(t)
        if record is None:
            return None
        with self._lock:
            full = self._recent.get(record.t)
        if full is None:
            return None
        ops_until_t = bisect.bisect_right(self._op_t, t, 0, len(self._ops))
        return full if ops_until_t == record.op_index else None

    def _rebuild(self, t: float) -> PoolSnapshot | None:
        if not self.keyframes:
            return None
        if self._rebuilder is None:
            from probes.rebuild import SnapshotRebuilder

            # a proxy, not the model: no reference cycle, so a session is freed as soon as its last user lets go
            self._rebuilder = SnapshotRebuilder(weakref.proxy(self))
        return self._rebuilder.snapshot_at(t)

    def history(self, until: float | None, limit: int = 0) -> list[SnapshotRecord]:
        """Snapshot summaries up to ``until``: the last ``limit`` of them (``limit`` < 0: at most ``-limit`` spread
        evenly over the whole span). ``snapshot_at(record.t)`` gives any of them in full."""
        snapshots = self.snapshots
        if until is not None:
            snapshots = snapshots[:bisect.bisect_right(snapshots, until, key=lambda s: s.t)]
        if limit > 0:
            return snapshots[-limit:]
        if limit < 0 and len(snapshots) > -limit:
            stride = len(snapshots) / -limit
            return [snapshots[int(k * stride)] for k in range(-limit)] + [snapshots[-1]]
        return list(snapshots)
