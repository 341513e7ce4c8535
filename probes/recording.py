"""Session recorder: turns the worker's ordered stream of typed events into session-file records (mlx-free).

What it owns: routing events to record kinds, converting worker ``time.monotonic()`` stamps to seconds since the
session start, numbering pool ops, the session id, and the keyframe rule (every snapshot the worker flags as a
keyframe, and the first full snapshot). Every pool snapshot is also stored as a light *summary* (the snapshot
without its per-row arrays) for timelines. Payloads are the typed records of ``probes.codec``, encoded once here.
"""

from __future__ import annotations

import os
import uuid

from probes import codec
from probes import format as fmt
from probes.codec import EndRecord, KeyframeRecord, OpsRecord, SampleBlock, SnapshotRecord
from probes.columns import FIELDS as SAMPLE_FIELDS
from probes.events import Done, Event, LogLine, MetaUpdate, OpBatch, Sample, SnapshotTaken, rebased


def new_session_id() -> str:
    return uuid.uuid4().hex


class SessionRecorder:
    """Writes one session file. Not thread-safe: one thread (the probes' flusher) calls ``write``/``close``.

    ``meta`` is the session's metadata (``session_id`` is added when it has none); ``t_start`` the worker's
    ``time.monotonic()`` at the start. The file is created by ``probes.format.RecordWriter``: exclusively (an
    existing one is replaced only with ``force``), or adopted from the process that claimed it (``claim_token``).
    """

    def __init__(self, path: str | os.PathLike, meta: dict, t_start: float, *, claim_token=None,
                 force: bool = False) -> None:
        self.path = os.fspath(path)
        self.t_start = float(t_start)
        self.num_ops = 0
        self.num_keyframes = 0
        self.meta = dict(meta, t_start=self.t_start, format_version=fmt.FORMAT_VERSION)
        self.session_id = str(self.meta.setdefault("session_id", new_session_id()))
        self._writer = fmt.RecordWriter(self.path, self.session_id, claim_token=claim_token, force=force)
        self._writer.append([(fmt.META, 0.0, codec.encode(self.meta))])
        self.closed = False

    @property
    def bytes_written(self) -> int:
        return self._writer.bytes_written

    def write(self, events: list[Event]) -> None:
        """Append a batch of worker events (in emission order) as one write: one record per kind."""
        samples: list[tuple[float, Sample]] = []
        timeline: list[Event] = []
        ops = OpsRecord(self.num_ops, [], [])
        summaries: list[SnapshotRecord] = []
        keyframes: list[KeyframeRecord] = []
        for event in events:
            match event:
                case Sample():
                    samples.append((event.t - self.t_start, event))
                case OpBatch():
                    ops.t.extend(t - self.t_start for t in event.op_t)
                    ops.ops.extend(event.ops)
                    self.num_ops += len(event.ops)
                case SnapshotTaken():
                    self._route_snapshot(event, summaries, keyframes)
                case Done():
                    continue  # becomes the END record in close()
                case MetaUpdate(meta=meta) if not meta:
                    continue
                case _:
                    timeline.append(rebased(event, self.t_start))
        records = []
        if timeline:
            records.append((fmt.EVENTS, timeline[0].t, codec.encode(timeline)))
        if ops.ops:
            records.append((fmt.OPS, ops.t[0], codec.encode(ops)))
        if summaries:
            records.append((fmt.SNAPSHOTS, summaries[0].t, codec.encode(summaries)))
        if samples:
            records.append((fmt.SAMPLES, samples[0][0], codec.encode(_columns(samples))))
        records += self._keyframe_records(keyframes)
        self._writer.append(records)

    def _keyframe_records(self, keyframes: list[KeyframeRecord]) -> list[tuple[int, float, bytes]]:
        """KEYFRAME records, except one larger than a reader accepts (``fmt.MAX_PAYLOAD``): that one is left out
        and said in a log line (an earlier keyframe and the op log still rebuild its instant)."""
        out = []
        for keyframe in keyframes:
            payload = codec.encode(keyframe)
            if len(payload) <= fmt.MAX_PAYLOAD:
                out.append((fmt.KEYFRAME, keyframe.t, payload))
                continue
            note = LogLine(t=keyframe.t, step=keyframe.step, tokens=keyframe.tokens,
                           text=f"keyframe at {keyframe.t:.3f} s not recorded: {len(payload):,} bytes, over the "
                                f"{fmt.MAX_PAYLOAD:,} a reader accepts")
            out.append((fmt.EVENTS, note.t, codec.encode([note])))
        return out

    def _route_snapshot(self, event: SnapshotTaken, summaries: list, keyframes: list) -> None:
        """Every snapshot becomes a summary; the ones the worker flags as keyframes (and the first full one) also
        a keyframe with the bookkeeping state."""
        t = event.t - self.t_start
        snap = event.snapshot
        summaries.append(SnapshotRecord(t, event.step, event.tokens, self.num_ops, snap.summary()))
        if snap.has_rows and (event.keyframe or self.num_keyframes == 0):
            keyframes.append(KeyframeRecord(t, event.step, event.tokens, self.num_ops, snap, event.book_state))
            self.num_keyframes += 1

    def close(self, summary: dict | None = None, t: float | None = None) -> None:
        """Write the END record (summary) and close; idempotent."""
        if self.closed:
            return
        t_rel = (t - self.t_start) if t is not None else 0.0
        self._writer.append([(fmt.END, t_rel, codec.encode(EndRecord(t_rel, summary or {})))])
        self._writer.close()
        self.closed = True

    def abandon(self) -> None:
        """Close without an END record (used by tests to mimic an unfinished file)."""
        self._writer.close(fsync=False)
        self.closed = True


def _columns(samples: list[tuple[float, Sample]]) -> SampleBlock:
    """Samples as one list per field (t relative): a third of the bytes of a list of records."""
    columns = {name: [getattr(sample, name) for _, sample in samples] for name in SAMPLE_FIELDS}
    columns["t"] = [t for t, _ in samples]
    return SampleBlock(columns)
