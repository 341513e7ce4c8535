"""The TUI's data model: one ``Track`` per backend run, built from the worker event stream (docs/contracts.md §2),
and a ``Store`` holding the tracks of the run or recordings on screen.

Live runs and recordings feed the same ``Track.add``: the ingest thread calls it for live worker events, and
``app.tui.sources`` calls it for every record of a recorded session. Views only read tracks (through ``Frame``),
never the workers or files, so switching a view from live to replay changes nothing in the view.

Thread model: exactly one writer per track (the ingest thread, or the UI thread while loading a recording); the UI
thread reads. Lists are append-only except ``snapshots`` (thinned when long), which is touched under ``lock``.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

# Pool snapshots kept per live track before the older half is thinned (every other one dropped).
MAX_SNAPSHOTS = 1200


@dataclass
class PhaseSpan:
    """A workload phase: name and start/end times in seconds since the track's first event."""

    name: str
    start: float
    end: float | None = None


@dataclass
class StepRecord:
    """One prefill/decode step as reported by the worker (times relative to the track's start)."""

    t: float
    step: int
    tokens: int
    type: str
    num_tokens: int
    wall_s: float
    batch: int
    phase: str


@dataclass
class FusedRecord:
    """One fused-decode decision for a layer."""

    t: float
    layer: int
    use_fused: bool
    reason: str


@dataclass
class SampleColumns:
    """Memory samples as parallel columns (cheap to plot and bisect). Bytes, except t (s), step and tokens."""

    t: list[float] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    footprint: list[float] = field(default_factory=list)
    active: list[float] = field(default_factory=list)
    cache: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    peak: list[float] = field(default_factory=list)
    raw: list[dict] = field(default_factory=list)

    def append(self, t: float, ev: dict) -> None:
        """Append one sample record; footprint defaults to active + cache when the record lacks it."""
        active = float(ev.get("active", 0) or 0)
        cache = float(ev.get("cache", 0) or 0)
        self.t.append(t)
        self.step.append(int(ev.get("step", 0) or 0))
        self.tokens.append(int(ev.get("tokens", 0) or 0))
        self.footprint.append(float(ev.get("footprint", active + cache) or 0))
        self.active.append(active)
        self.cache.append(cache)
        self.rss.append(float(ev.get("rss", 0) or 0))
        self.peak.append(float(ev.get("peak", 0) or 0))
        self.raw.append(ev)

    def __len__(self) -> int:
        return len(self.t)


class Track:
    """Everything known about one backend's run, in arrival order. Owns its lists; mutated only by ``add``."""

    def __init__(self, name: str, source: str = "live") -> None:
        self.name = name
        self.source = source  # "live" or the recording's path
        self.lock = threading.Lock()
        self.meta: dict[str, Any] = {}
        self.t0: float | None = None
        self.samples = SampleColumns()
        self.last_sample: dict[str, Any] = {}
        self.phases: list[PhaseSpan] = []
        self.steps: list[StepRecord] = []
        self.snapshots: list[tuple[float, int, int, dict]] = []  # (t, step, tokens, snapshot)
        self.ops: list[tuple[float, dict]] = []
        self.gathers: list[tuple[float, int, dict]] = []
        self.fused: list[FusedRecord] = []
        self.logs: list[tuple[float, str]] = []
        self.error: str | None = None
        self.traceback: str = ""
        self.done: dict | None = None
        self.events_seen = 0
        self.overhead: dict = {}  # latest probe_stats figures
        self.dropped_batches = 0
        self.step = 0
        self.tokens = 0
        # Recordings rebuild exact snapshots from keyframes + op log; live tracks bisect ``snapshots``.
        self.snapshot_source: Callable[[float], dict | None] | None = None
        self.session: Any = None  # the probes Session a recording track was loaded from
        self.derived: dict[str, dict] = {}  # per-view caches of figures derived from immutable snapshots

    # ---- writing -------------------------------------------------------------------------------------------
    def add(self, ev: dict) -> None:
        """Fold one worker event into the track (unknown kinds are counted and ignored)."""
        self.events_seen += 1
        t_abs = float(ev.get("t", 0.0) or 0.0)
        if self.t0 is None:
            self.t0 = t_abs
        t = t_abs - self.t0
        step, tokens = ev.get("step"), ev.get("tokens")
        if isinstance(step, int) and step >= 0:  # a parent-made death event says -1: keep the last real count
            self.step = step
        if isinstance(tokens, int) and tokens >= 0:
            self.tokens = tokens
        handler = _HANDLERS.get(ev.get("kind", ""))
        if handler is not None:
            handler(self, t, ev)

    def fail(self, text: str, traceback: str = "") -> None:
        """Mark the run as crashed (worker exception, kill, or lost process); the first error wins."""
        if self.error is None:
            self.error = text or "worker failed"
            self.traceback = traceback

    def _add_snapshot(self, t: float, ev: dict) -> None:
        snap = ev.get("snapshot")
        if not isinstance(snap, dict):
            return
        with self.lock:
            self.snapshots.append((t, self.step, self.tokens, snap))
            if len(self.snapshots) > MAX_SNAPSHOTS:
                half = len(self.snapshots) // 2
                self.snapshots[:half] = self.snapshots[:half:2]

    # ---- reading -------------------------------------------------------------------------------------------
    @property
    def status(self) -> str:
        """'error', 'done', 'running' or 'waiting' (no event yet)."""
        if self.error:
            return "error"
        if self.done is not None:
            return "done"
        return "running" if self.events_seen else "waiting"

    @property
    def is_pool(self) -> bool:
        """True for pool backends (they emit snapshots); dense has none."""
        return bool(self.snapshots) or self.name in ("slab", "monolithic") or self.snapshot_source is not None

    @property
    def duration(self) -> float:
        """Seconds from the first to the latest time seen."""
        last = [self.samples.t[-1]] if self.samples.t else []
        if self.steps:
            last.append(self.steps[-1].t)
        if self.snapshots:
            last.append(self.snapshots[-1][0])
        return max(last) if last else 0.0

    def snapshot_at(self, t: float | None) -> tuple[float, dict] | None:
        """The pool snapshot in force at relative time ``t`` (None: the latest), with its time."""
        if self.snapshot_source is not None:
            if t is None:
                times = self.snapshot_times()
                t = times[-1] if times else self.duration
            snap = self.snapshot_source(t)
            return (t, snap) if snap is not None else None  # summaries lack rows: never fall back to them
        with self.lock:
            if not self.snapshots:
                return None
            if t is None:
                return self.snapshots[-1][0], self.snapshots[-1][3]
            i = bisect.bisect_right([s[0] for s in self.snapshots], t) - 1
            if i < 0:
                return None
            return self.snapshots[i][0], self.snapshots[i][3]

    def history(self, cursor: float | None, limit: int = 0, full: bool = False) -> list[tuple[float, int, dict]]:
        """(t, step, snapshot) of kept snapshots up to the cursor; the last ``limit`` of them (evenly thinned when
        ``limit`` is negative: at most -limit spread over the whole span). ``full`` asks recordings for rebuilt
        snapshots with per-row arrays (live snapshots are always full)."""
        with self.lock:
            items = [(s[0], s[1], s[3]) for s in self.snapshots if cursor is None or s[0] <= cursor]
        if limit > 0:
            items = items[-limit:]
        elif limit < 0 and len(items) > -limit:
            stride = len(items) / -limit
            items = [items[int(k * stride)] for k in range(-limit)] + [items[-1]]
        if full and self.snapshot_source is not None:
            items = [(t, step, self.snapshot_source(t) or snap) for t, step, snap in items]
        return items

    def snapshot_times(self) -> list[float]:
        """Times of the kept snapshots (for stepping the replay cursor)."""
        with self.lock:
            return [s[0] for s in self.snapshots]

    def sample_index(self, t: float | None) -> int:
        """Number of samples at or before ``t`` (all of them for None)."""
        if t is None:
            return len(self.samples)
        return bisect.bisect_right(self.samples.t, t)

    def peak_time(self) -> float | None:
        """Relative time of the largest footprint sample (max(active + cache)), None without samples."""
        fp = self.samples.footprint
        if not fp:
            return None
        i = max(range(len(fp)), key=fp.__getitem__)
        return self.samples.t[i]

    def phase_at(self, t: float | None) -> str:
        """Name of the phase running at ``t`` (the latest for None), '' outside phases."""
        name = ""
        for span in self.phases:
            if t is None or span.start <= t:
                name = span.name if (span.end is None or t is None or t <= span.end) else name
        return name

    def probe_overhead(self) -> str:
        """The probes' own measured cost as a percentage of wall time ('' until the probes report it)."""
        src = (self.done or {}).get("probe_overhead") or self.overhead
        frac = src.get("cost_fraction") if isinstance(src, dict) else None
        return f"{100 * frac:.2f}%" if isinstance(frac, (int, float)) else ""


def _on_meta(track: Track, t: float, ev: dict) -> None:
    track.meta.update({k: v for k, v in ev.items() if k not in ("kind", "t")})


def _on_phase(track: Track, t: float, ev: dict) -> None:
    name = str(ev.get("name", "?"))
    if ev.get("edge") == "end":
        for span in reversed(track.phases):
            if span.name == name and span.end is None:
                span.end = t
                return
    else:
        track.phases.append(PhaseSpan(name, t))


def _on_step(track: Track, t: float, ev: dict) -> None:
    track.steps.append(
        StepRecord(t, track.step, track.tokens, str(ev.get("type", "decode")), int(ev.get("num_tokens", 0) or 0),
                   float(ev.get("wall_s", 0.0) or 0.0), int(ev.get("batch", 1) or 1), str(ev.get("phase", "")))
    )


def _on_sample(track: Track, t: float, ev: dict) -> None:
    track.samples.append(t, ev)
    track.last_sample = ev


def _on_ops(track: Track, t: float, ev: dict) -> None:
    for op in ev.get("ops", []) or []:
        if isinstance(op, dict):
            track.ops.append((t, op))


def _on_gather(track: Track, t: float, ev: dict) -> None:
    track.gathers.append((t, track.step, dict(ev.get("layer_runs", {}) or {})))


def _on_fused(track: Track, t: float, ev: dict) -> None:
    track.fused.append(FusedRecord(t, int(ev.get("layer", 0)), bool(ev.get("use_fused")), str(ev.get("reason", ""))))


def _on_log(track: Track, t: float, ev: dict) -> None:
    track.logs.append((t, str(ev.get("text", ""))))


def _on_error(track: Track, t: float, ev: dict) -> None:
    track.fail(str(ev.get("text", "worker error")), str(ev.get("traceback", "")))


def _on_done(track: Track, t: float, ev: dict) -> None:
    track.done = dict(ev.get("summary", {}) or {})


def _on_probe_stats(track: Track, t: float, ev: dict) -> None:
    track.overhead = dict(ev.get("overhead", {}) or {})


def _on_dropped(track: Track, t: float, ev: dict) -> None:
    track.dropped_batches = max(track.dropped_batches, int(ev.get("batches", 0) or 0))


_HANDLERS: dict[str, Callable[[Track, float, dict], None]] = {
    "meta": _on_meta,
    "phase": _on_phase,
    "step": _on_step,
    "sample": _on_sample,
    "snapshot": lambda tr, t, ev: tr._add_snapshot(t, ev),
    "op": _on_ops,
    "ops": _on_ops,
    "gather": _on_gather,
    "fused": _on_fused,
    "log": _on_log,
    "error": _on_error,
    "done": _on_done,
    "probe_stats": _on_probe_stats,
    "dropped": _on_dropped,
}


class Store:
    """The tracks on screen (one per backend, or per opened recording), in display order."""

    def __init__(self) -> None:
        self.tracks: dict[str, Track] = {}
        self.generation = 0  # bumped whenever the set of tracks is replaced
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Drop every track (a new run or a newly opened recording). Writers of the old generation are refused
        from now on (a stopping run's last events never leak into what replaces it)."""
        with self._lock:
            self.tracks = {}
            self.generation += 1

    def track(self, name: str, source: str = "live") -> Track:
        """The track called ``name``, created on first use."""
        if name not in self.tracks:
            self.tracks[name] = Track(name, source)
        return self.tracks[name]

    def ingest(self, name: str, events: list[dict], generation: int | None = None) -> bool:
        """Fold a batch of events from worker ``name`` into its track; refused (False) when ``generation`` is
        given and the store has been reset since."""
        with self._lock:
            if generation is not None and generation != self.generation:
                return False
            track = self.track(name)
            for ev in events:
                track.add(ev)
        return True

    def pool_tracks(self) -> list[Track]:
        """Tracks that carry pool snapshots (slab/monolithic), in display order."""
        return [t for t in self.tracks.values() if t.is_pool]

    def duration(self) -> float:
        """Longest track duration (s)."""
        return max((t.duration for t in self.tracks.values()), default=0.0)


@dataclass
class Frame:
    """What views draw at one refresh: the store, the cursor (None = live/latest), and the display choices."""

    store: Store
    cursor: float | None
    x_mode: str = "time"  # "time" | "step" | "tokens"
    pool_name: str | None = None  # which pool track the pool views show
    gate: float = 1.15

    def pool_track(self) -> Track | None:
        """The pool track the pool views show (the chosen one, else the first)."""
        pools = self.store.pool_tracks()
        for tr in pools:
            if tr.name == self.pool_name:
                return tr
        return pools[0] if pools else None

    def snapshot(self) -> tuple[float, dict] | None:
        """The chosen pool track's snapshot at the cursor."""
        tr = self.pool_track()
        return tr.snapshot_at(self.cursor) if tr else None
