"""The query API shared by recordings (``probes.replay.Session``) and live runs (``LiveStore``); mlx-free.

Times are seconds since the session start (the worker's first ``time.monotonic()`` stamp, ``meta["t_start"]``).
``SessionView`` holds plain lists (samples, events, pool-snapshot summaries, ops, keyframes) and answers every
query from them; subclasses only fill the lists. ``LiveStore.append(event)`` takes raw worker events (absolute
monotonic ``t``), so a UI can query a running worker exactly as it queries a file.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Iterator

from probes.recording import snapshot_summary


@dataclass(frozen=True)
class Frame:
    """The state of a session at instant ``t``: latest sample and snapshot summary at or before ``t``."""

    t: float
    step: int
    tokens: int
    phase: str | None
    sample: dict | None
    snapshot: dict | None  # summary (no per-row arrays); use snapshot_at(t) for the rebuilt full snapshot


@dataclass(frozen=True)
class Peak:
    """A peak value with what it is: ``label`` is "max since start" or "max in window [a, b] s"."""

    value: float
    t: float | None
    label: str


class Keyframe:
    """Index entry of a full pool snapshot at time ``t``; ``load()`` returns ``(op_index, {"snapshot": full pool
    snapshot, "book": bookkeeping state or None})``, ``op_index`` being the number of pool ops before it.
    Loaded on first use, then cached."""

    __slots__ = ("t", "_loader", "_value")

    def __init__(self, t: float, loader: Callable[[], tuple[int, dict]]) -> None:
        self.t = t
        self._loader = loader
        self._value: tuple[int, dict] | None = None

    def load(self) -> tuple[int, dict]:
        if self._value is None:
            self._value = self._loader()
        return self._value


class SessionView:
    """Read-side queries over one backend run. Subclasses fill ``meta``, ``summary``, ``samples``, ``events``,
    ``snapshots`` (summaries with ``t``, ``step``, ``tokens``, ``op_index``, ``snapshot``), ``keyframes``
    (``Keyframe`` list) and provide ``ops`` (op dicts with ``t`` and ``i``)."""

    meta: dict
    summary: dict | None
    samples: list[dict]
    events: list[dict]
    snapshots: list[dict]
    keyframes: list[Keyframe]

    def __init__(self) -> None:
        self._cursor = 0.0
        self._rebuilder = None

    @property
    def ops(self) -> list[dict]:
        raise NotImplementedError

    def ops_range(self, op_index: int, t: float) -> list[dict]:
        """Ops numbered ``op_index`` and later that happened at or before ``t``, in order."""
        ops = self.ops
        hi = bisect.bisect_right(ops, t, lo=op_index, key=lambda op: op["t"])
        return ops[op_index:hi]

    # ---- time ------------------------------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """True when the worker closed the session normally (an END record / "done" event exists)."""
        return self.summary is not None

    @property
    def duration(self) -> float:
        """Seconds from the start to the last thing recorded."""
        ends = [0.0]
        for seq in (self.samples, self.events, self.snapshots):
            if seq:
                ends.append(seq[-1]["t"])
        if self.summary is not None and "t" in self.summary:
            ends.append(self.summary["t"])
        return max(ends)

    @staticmethod
    def _latest_at(seq: list[dict], t: float) -> dict | None:
        """The last item of the time-sorted ``seq`` with ``item["t"] <= t`` (None if none)."""
        i = bisect.bisect_right(seq, t, key=lambda item: item["t"])
        return seq[i - 1] if i else None

    def sample_at(self, t: float) -> dict | None:
        return self._latest_at(self.samples, t)

    def samples_between(self, t0: float, t1: float) -> list[dict]:
        lo = bisect.bisect_left(self.samples, t0, key=lambda s: s["t"])
        hi = bisect.bisect_right(self.samples, t1, key=lambda s: s["t"])
        return self.samples[lo:hi]

    def events_between(self, t0: float, t1: float, kind: str | None = None) -> list[dict]:
        lo = bisect.bisect_left(self.events, t0, key=lambda e: e["t"])
        hi = bisect.bisect_right(self.events, t1, key=lambda e: e["t"])
        return [e for e in self.events[lo:hi] if kind is None or e.get("kind") == kind]

    def phases(self) -> list[dict]:
        """Phase spans ``{"name", "start", "end"}`` from phase events (end None while still open); cached until
        new events arrive."""
        events = self.events
        cached = getattr(self, "_phases_cache", None)
        if cached is not None and cached[0] == len(events):
            return cached[1]
        spans = self._phase_spans(events)
        self._phases_cache = (len(events), spans)
        return spans

    @staticmethod
    def _phase_spans(events: list[dict]) -> list[dict]:
        spans: list[dict] = []
        open_spans: dict[str, dict] = {}
        for e in events:
            if e.get("kind") != "phase":
                continue
            if e.get("edge") == "start":
                span = {"name": e["name"], "start": e["t"], "end": None}
                spans.append(span)
                open_spans[e["name"]] = span
            elif e.get("edge") == "end" and e.get("name") in open_spans:
                open_spans.pop(e["name"])["end"] = e["t"]
        return spans

    def phase_at(self, t: float) -> str | None:
        current = None
        for span in self.phases():
            if span["start"] <= t and (span["end"] is None or t <= span["end"]):
                current = span["name"]
        return current

    def time_of_step(self, step: int) -> float | None:
        """First time the workload's step counter reached ``step`` (from samples and step events)."""
        best = None
        for seq in (self.samples, self.events):
            for item in seq:
                if item.get("step", -1) >= step:
                    best = item["t"] if best is None else min(best, item["t"])
                    break
        return best

    # ---- frames, iteration, seek -----------------------------------------------------------------------------
    def frame_at(self, t: float) -> Frame:
        t = min(max(t, 0.0), self.duration)
        sample = self.sample_at(t)
        snap = self._latest_at(self.snapshots, t)
        counters = [x for x in (sample, snap) if x is not None]
        step = max((x.get("step", 0) for x in counters), default=0)
        tokens = max((x.get("tokens", 0) for x in counters), default=0)
        return Frame(t, step, tokens, self.phase_at(t), sample, snap["snapshot"] if snap else None)

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
        for e in self.events:
            if e.get("kind") == "step":
                yield self.frame_at(e["t"])

    # ---- figures ---------------------------------------------------------------------------------------------
    def peak(self, field: str = "footprint", t0: float | None = None, t1: float | None = None) -> Peak:
        """Max of a sample field; labelled "max since start" for the whole run, else "max in window"."""
        whole = t0 is None and t1 is None
        lo = 0.0 if t0 is None else t0
        hi = self.duration if t1 is None else t1
        window = self.samples if whole else self.samples_between(lo, hi)
        best = max(window, key=lambda s: s.get(field, 0), default=None)
        label = "max since start" if whole else f"max in window [{lo:.2f}, {hi:.2f}] s"
        if best is None:
            return Peak(0.0, None, label)
        return Peak(float(best.get(field, 0)), best["t"], label)

    @property
    def overhead(self) -> dict:
        """The probes' measured cost (from the END summary, else the latest probe_stats event)."""
        if self.summary and "probe_overhead" in self.summary.get("summary", {}):
            return self.summary["summary"]["probe_overhead"]
        stats = [e for e in self.events if e.get("kind") == "probe_stats"]
        return stats[-1].get("overhead", {}) if stats else {}

    # ---- pool state --------------------------------------------------------------------------------------------
    def snapshot_at(self, t: float) -> dict | None:
        """The full pool snapshot at ``t``: nearest keyframe at or before ``t`` plus the op log up to ``t``
        (see probes.rebuild). None for sessions without a pool (dense backend)."""
        if not self.keyframes:
            return None
        if self._rebuilder is None:
            from probes.rebuild import SnapshotRebuilder

            self._rebuilder = SnapshotRebuilder(self)
        return self._rebuilder.snapshot_at(t)


class LiveStore(SessionView):
    """A session being received from a live worker: ``append`` raw worker events, query like a recording.

    Single writer (the thread that drains the worker queue), any number of readers; lists are append-only.
    Keeps at most ``max_keyframes`` full snapshots (older ones thinned: every other dropped).
    """

    def __init__(self, keyframe_interval_s: float = 10.0, max_keyframes: int = 360) -> None:
        super().__init__()
        self.meta: dict = {}
        self.summary: dict | None = None
        self.samples, self.events, self.snapshots = [], [], []
        self.keyframes: list[Keyframe] = []
        self._ops: list[dict] = []
        self._t_start: float | None = None
        self._keyframe_interval_s = keyframe_interval_s
        self._max_keyframes = max_keyframes

    @property
    def ops(self) -> list[dict]:
        return self._ops

    def _rel(self, t: float | None) -> float:
        if self._t_start is None:
            self._t_start = float(t or 0.0)
        return float(t if t is not None else self._t_start) - self._t_start

    def append(self, event: dict) -> None:
        """Route one raw worker event (docs/contracts.md section 2) into the store."""
        kind = event.get("kind")
        if kind == "meta":
            self._t_start = float(event.get("t_start", event.get("t", 0.0)))
            self.meta = dict(event)
            return
        ev = dict(event, t=self._rel(event.get("t")))
        if kind == "sample":
            self.samples.append(ev)
        elif kind == "op":
            for op in event.get("ops", []):
                op = dict(op, t=self._rel(op.get("t", event.get("t"))), i=len(self._ops))
                self._ops.append(op)
        elif kind == "snapshot":
            self._add_snapshot(ev)
        elif kind == "done":
            self.summary = {"t": ev["t"], "summary": event.get("summary", {})}
        else:
            self.events.append(ev)

    def _add_snapshot(self, ev: dict) -> None:
        snap = ev["snapshot"]
        base = {"t": ev["t"], "step": ev.get("step", 0), "tokens": ev.get("tokens", 0), "op_index": len(self._ops)}
        self.snapshots.append(dict(base, snapshot=snapshot_summary(snap)))
        last = self.keyframes[-1].t if self.keyframes else None
        if "keyframe" in ev:
            due = bool(ev["keyframe"])
        else:
            due = last is None or ev["t"] - last >= self._keyframe_interval_s
        if due:
            value = (base["op_index"], {"snapshot": snap, "book": ev.get("book")})
            self.keyframes.append(Keyframe(ev["t"], lambda value=value: value))
            if len(self.keyframes) > self._max_keyframes:
                thinned = self.keyframes[::2]
                if thinned[-1] is not self.keyframes[-1]:
                    thinned.append(self.keyframes[-1])
                self.keyframes = thinned
