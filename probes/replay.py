"""Recorded sessions: ``Session.open(path)`` reads a session file into the shared query API (mlx-free).

Opening reads the file, verifies every record's checksum and decodes metadata, samples, events and snapshot
summaries; ops and keyframes (the bulky part) stay as byte ranges until ``snapshot_at``/``ops`` needs them.
A torn tail (writer killed mid-write) is ignored and reported by ``incomplete_tail_bytes``; every other
problem raises ``RecordingError`` with a one-line message.
"""

from __future__ import annotations

import bisect
import os
from typing import Iterator

from probes import format as fmt
from probes.errors import RecordingError
from probes.recording import from_columnar
from probes.store import Keyframe, SessionView



class Session(SessionView):
    """One recorded backend run. Build with ``Session.open(path)``; see ``SessionView`` for the queries.

    ``samples`` are decoded at open; ``events``, ``snapshots`` and ``ops`` on first access; keyframes on use."""

    def __init__(self, image: fmt.FileImage) -> None:
        super().__init__()
        self.path = image.path
        self._image = image
        self.incomplete_tail_bytes = image.incomplete_tail
        self.meta: dict = {}
        self.summary: dict | None = None
        self._events: list[dict] | None = None
        self._snapshots: list[dict] | None = None
        self._ops: list[dict] | None = None
        self._op_windows: dict[tuple[int, int], list[dict]] = {}
        self._load()

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Session":
        """Open a session file; raises ``RecordingError`` (one line) if it is not a readable recording."""
        return cls(fmt.FileImage(path))

    def _decode(self, ref: fmt.RecordRef, want: type) -> object:
        obj = self._image.decode(ref)
        if not isinstance(obj, want):
            raise RecordingError(self.path, f"malformed {fmt.KIND_NAMES[ref.kind]} record at byte {ref.offset}")
        return obj

    def _load(self) -> None:
        image = self._image
        if not image.refs or image.refs[0].kind != fmt.META:
            raise RecordingError(self.path, "no metadata record (file truncated right after its header)")
        if len(image.by_kind[fmt.META]) > 1:
            raise RecordingError(self.path, f"second metadata record at byte {image.by_kind[fmt.META][1].offset}")
        self.meta = self._decode(image.refs[0], dict)
        ends = image.by_kind[fmt.END]
        if ends:
            self.summary = self._decode(ends[-1], dict)
            if not isinstance(self.summary.get("t", 0.0), (int, float)):
                raise RecordingError(self.path, "malformed end record")
        try:
            samples = from_columnar(image.decode_lists(image.by_kind[fmt.SAMPLES]))
        except (ValueError, TypeError):
            raise RecordingError(self.path, "malformed samples record") from None
        self.samples = self._checked(samples, "samples")
        self.keyframes = [self._keyframe_entry(ref) for ref in image.by_kind[fmt.KEYFRAME]]

    def _checked(self, items: list, what: str) -> list[dict]:
        """Items must be dicts with a numeric "t"; returned sorted by t (batches are in order already)."""
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("t"), (int, float)):
                raise RecordingError(self.path, f"malformed {what} item")
        items.sort(key=lambda item: item["t"])
        return items

    @property
    def events(self) -> list[dict]:
        """Workload and probe events (phase/step/log/error/gather/fused/dropped/probe_stats...), time-ordered."""
        if self._events is None:
            events = self._checked(self._image.decode_lists(self._image.by_kind[fmt.EVENTS]), "events")
            for e in events:
                if e.get("kind") == "meta":  # metadata the workload added after start
                    self.meta.update({k: v for k, v in e.items() if k not in ("kind", "t", "step", "tokens")})
            self._events = [e for e in events if e.get("kind") != "meta"]
        return self._events

    @property
    def snapshots(self) -> list[dict]:
        """Pool snapshot summaries ``{"t", "step", "tokens", "op_index", "snapshot"}`` (no per-row arrays)."""
        if self._snapshots is None:
            snaps = self._checked(self._image.decode_lists(self._image.by_kind[fmt.SNAPSHOTS]), "snapshots")
            for s in snaps:
                if not isinstance(s.get("snapshot"), dict) or not isinstance(s.get("op_index"), int):
                    raise RecordingError(self.path, "malformed snapshot summary")
            self._snapshots = snaps
        return self._snapshots

    @property
    def duration(self) -> float:
        if self.summary is not None and isinstance(self.summary.get("t"), (int, float)):
            return max(float(self.summary["t"]), self.samples[-1]["t"] if self.samples else 0.0)
        return super().duration

    def _keyframe_entry(self, ref: fmt.RecordRef) -> Keyframe:
        """Index a keyframe by its header time; the bulky payload is decoded on first ``load()``."""

        def load() -> tuple[int, dict]:
            payload = self._decode(ref, dict)
            if not isinstance(payload.get("op_index"), int) or not isinstance(payload.get("snapshot"), dict):
                raise RecordingError(self.path, f"malformed keyframe record at byte {ref.offset}")
            return payload["op_index"], {"snapshot": payload["snapshot"], "book": payload.get("book")}

        return Keyframe(ref.t, load)

    @property
    def ops(self) -> list[dict]:
        """Every recorded pool op in order (decoded on first use; what-if replays need them all)."""
        if self._ops is None:
            self._ops = self._checked(self._image.decode_lists(self._image.by_kind[fmt.OPS]), "ops")
        return self._ops

    def ops_range(self, op_index: int, t: float) -> list[dict]:
        """Ops numbered ``op_index`` and later, at or before ``t``, decoding only the op records that can hold
        them (from the last record that starts at or before op ``op_index``'s keyframe, to ``t``)."""
        if self._ops is not None:
            return super().ops_range(op_index, t)
        refs = self._image.by_kind[fmt.OPS]
        lo = max(0, bisect.bisect_right(refs, self._op_time_hint(op_index), key=lambda r: r.t) - 1)
        hi = bisect.bisect_right(refs, t, key=lambda r: r.t)
        key = (lo, hi)
        if key not in self._op_windows:
            if len(self._op_windows) > 16:
                self._op_windows.clear()
            self._op_windows[key] = self._checked(self._image.decode_lists(refs[lo:hi]), "ops")
        return [op for op in self._op_windows[key] if op.get("i", -1) >= op_index and op["t"] <= t]

    def _op_time_hint(self, op_index: int) -> float:
        """Time of the keyframe that starts at ``op_index`` (ops after it are not older than it)."""
        for kf in self.keyframes:
            if kf._value is not None and kf._value[0] == op_index:
                return kf.t
        return 0.0

    def replay_events(self) -> Iterator[dict]:
        """All records as worker-style events (``t`` relative; the meta event says ``t_start`` 0.0), time-ordered:
        meta first, then samples, events, snapshot summaries (``kind`` "snapshot", full=False) and op batches
        (consecutive ops coalesced); "done" last if present."""
        # Times here are relative, so the meta says the clock starts at 0 (the worker's own start is kept).
        yield dict(self.meta, kind="meta", t=0.0, t_start=0.0, recorded_t_start=self.meta.get("t_start"))
        merged: list[tuple[float, int, dict]] = []
        merged += [(s["t"], 0, dict(s, kind="sample")) for s in self.samples]
        merged += [(e["t"], 1, e) for e in self.events]
        merged += [(s["t"], 2, {"kind": "snapshot", "t": s["t"], "step": s["step"], "tokens": s["tokens"],
                                "snapshot": s["snapshot"], "full": False}) for s in self.snapshots]
        merged += [(op["t"], 3, {"kind": "op", "t": op["t"], "ops": [op]}) for op in self.ops]
        merged.sort(key=lambda x: (x[0], x[1]))
        pending: dict | None = None  # consecutive ops are coalesced into one "op" event
        for _t, _order, ev in merged:
            if ev["kind"] == "op":
                if pending is None:
                    pending = {"kind": "op", "t": ev["t"], "ops": []}
                pending["ops"].extend(ev["ops"])
                continue
            if pending is not None:
                yield pending
                pending = None
            yield ev
        if pending is not None:
            yield pending
        if self.summary is not None:
            yield {"kind": "done", "t": self.summary.get("t", self.duration),
                   "summary": self.summary.get("summary", {})}
