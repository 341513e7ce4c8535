"""Session recorder: turns the worker's ordered event stream into session-file records (mlx-free).

What it owns: routing events to record kinds, converting worker ``time.monotonic()`` stamps to seconds since the
session start, numbering pool ops, and the keyframe policy (a full pool snapshot every ``keyframe_interval_s``
seconds or every ``keyframe_max_ops`` ops, whichever comes first, plus the first snapshot). Every pool snapshot
is also stored as a light *summary* (the snapshot without its per-row arrays) for timelines.

Record payloads (format v1):
    META      dict: versions, device, model, scenario, params, pool config, commit, "t_start" (monotonic)
    SAMPLES   sample dicts (probes.sampler) in columnar blocks [[keys, rows], ...] (see ``columnar``), "t" relative
    EVENTS    list of event dicts (phase/step/gather/fused/log/error/dropped/probe_stats...), "t" relative
    OPS       list of pool op dicts with "t" (relative) and "i" (op index from 0)
    SNAPSHOTS list of snapshot summaries {"t", "step", "tokens", "op_index", "snapshot": <summary>}
    KEYFRAME  {"t", "step", "tokens", "op_index", "snapshot": <full pool snapshot>,
               "book": <pool bookkeeping state, probes.bookstate> | None}
    END       {"t", "summary": {...}} (absent when the writer died)
"""

from __future__ import annotations

import os

from probes import format as fmt

FULL_ONLY_LAYER_KEYS = ("row_owner", "row_refcount")


def snapshot_summary(snapshot: dict) -> dict:
    """The snapshot without per-row arrays (what timelines need); pure function."""
    out = {k: v for k, v in snapshot.items() if k != "seq_rows"}
    out["layers"] = [{k: v for k, v in layer.items() if k not in FULL_ONLY_LAYER_KEYS}
                     for layer in snapshot.get("layers", [])]
    return out


def columnar(samples: list[dict]) -> list[list]:
    """Samples as ``[[keys, rows], ...]`` blocks (one block per distinct key set): a third of the bytes of a list of
    dicts and twice as fast to parse. Inverse: ``from_columnar``."""
    blocks: dict[tuple, list] = {}
    for sample in samples:
        blocks.setdefault(tuple(sample), []).append(list(sample.values()))
    return [[list(keys), rows] for keys, rows in blocks.items()]


def from_columnar(blocks: list) -> list[dict]:
    """Sample dicts from ``columnar`` blocks; ValueError/TypeError on malformed input."""
    out: list[dict] = []
    checked: set[tuple] = set()
    for keys, rows in blocks:
        key = tuple(keys)
        if key not in checked:
            if not all(isinstance(k, str) for k in key):
                raise ValueError("sample block keys must be strings")
            checked.add(key)
        out.extend(dict(zip(key, row)) for row in rows)
    return out


class SessionRecorder:
    """Writes one session file. Not thread-safe: one thread (the probes' flusher) calls ``write``/``close``."""

    def __init__(self, path: str | os.PathLike, meta: dict, t_start: float,
                 keyframe_interval_s: float = 10.0, keyframe_max_ops: int = 20000) -> None:
        self.path = os.fspath(path)
        self.t_start = float(t_start)
        self.keyframe_interval_s = keyframe_interval_s
        self.keyframe_max_ops = keyframe_max_ops
        self.num_ops = 0
        self.num_keyframes = 0
        self._last_keyframe_t: float | None = None
        self._last_keyframe_ops = 0
        self._writer = fmt.RecordWriter(self.path)
        self._writer.append([(fmt.META, 0.0, dict(meta, t_start=self.t_start, format_version=fmt.FORMAT_VERSION))])
        self.closed = False

    @property
    def bytes_written(self) -> int:
        return self._writer.bytes_written

    def _rel(self, event: dict) -> dict:
        out = {k: v for k, v in event.items() if k not in ("book", "keyframe")}
        out["t"] = float(event.get("t", self.t_start)) - self.t_start
        return out

    def write(self, events: list[dict]) -> None:
        """Append a batch of worker events (in emission order) as one write: groups them per record kind."""
        groups: dict[int, list] = {fmt.SAMPLES: [], fmt.EVENTS: [], fmt.OPS: [], fmt.SNAPSHOTS: []}
        keyframes: list[dict] = []
        for event in events:
            kind = event.get("kind")
            if kind == "sample":
                groups[fmt.SAMPLES].append(self._rel(event))
            elif kind == "op":
                groups[fmt.OPS].extend(self._number_ops(event))
            elif kind == "snapshot":
                self._route_snapshot(event, groups[fmt.SNAPSHOTS], keyframes)
            elif kind == "done":
                continue  # becomes the END record in close()
            else:
                groups[fmt.EVENTS].append(self._rel(event))
        samples = groups.pop(fmt.SAMPLES)
        records = [(kind, items[0]["t"], items) for kind, items in groups.items() if items]
        if samples:
            records.append((fmt.SAMPLES, samples[0]["t"], columnar(samples)))
        records += [(fmt.KEYFRAME, kf["t"], kf) for kf in keyframes]
        self._writer.append(records)

    def _number_ops(self, event: dict) -> list[dict]:
        t = float(event.get("t", self.t_start)) - self.t_start
        out = []
        for op in event.get("ops", []):
            op = dict(op)
            op["t"] = float(op["t"]) - self.t_start if "t" in op else t
            op["i"] = self.num_ops
            self.num_ops += 1
            out.append(op)
        return out

    def _route_snapshot(self, event: dict, summaries: list, keyframes: list) -> None:
        """Every snapshot becomes a summary; keyframes are the ones the worker flagged (``"keyframe": True``, with
        the bookkeeping state in ``"book"``), or, for streams that flag none, one per interval/op budget."""
        snap = event["snapshot"]
        base = {"t": self._rel(event)["t"], "step": event.get("step", 0), "tokens": event.get("tokens", 0),
                "op_index": self.num_ops}
        summaries.append(dict(base, snapshot=snapshot_summary(snap)))
        if "keyframe" in event:
            due = bool(event["keyframe"])
        else:
            due = (self._last_keyframe_t is None
                   or base["t"] - self._last_keyframe_t >= self.keyframe_interval_s
                   or self.num_ops - self._last_keyframe_ops >= self.keyframe_max_ops)
        if due:
            keyframes.append(dict(base, snapshot=snap, book=event.get("book")))
            self._last_keyframe_t = base["t"]
            self._last_keyframe_ops = self.num_ops
            self.num_keyframes += 1

    def close(self, summary: dict | None = None, t: float | None = None) -> None:
        """Write the END record (summary) and close; idempotent."""
        if self.closed:
            return
        t_rel = (t - self.t_start) if t is not None else 0.0
        self._writer.append([(fmt.END, t_rel, {"t": t_rel, "summary": summary or {}})])
        self._writer.close()
        self.closed = True

    def abandon(self) -> None:
        """Close without an END record (used by tests to mimic an unfinished file)."""
        self._writer.close(fsync=False)
        self.closed = True
