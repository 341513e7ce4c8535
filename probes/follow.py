"""Following a recording while it is written: ``GrowingSession`` (mlx-free).

A rank of ``slabscope record --ranks`` writes its crash-safe recording as it runs (one ``os.write`` per batch,
every half second). ``GrowingSession.open(path)`` reads what is there, like ``probes.replay.Session``, and each
``refresh()`` reads only the bytes appended since, indexes them with the same checks (checksums, record numbering,
session tag: ``probes.format.FileImage``) and folds the new records into the same read model: samples, timeline
events, snapshot summaries, keyframes, the END summary. Ops stay byte ranges decoded on demand, as in a recording.
A record still being written (a torn tail) is left for the next refresh.

Threads: one thread calls ``refresh`` (the TUI's follower), any number read. Lists a reader may hold are only
appended to or replaced whole; the rebuilt-snapshot cache is keyed by how many op records are known, so a seek
after new ops rebuilds.
"""

from __future__ import annotations

import os

from probes import format as fmt
from probes.errors import ImpossibleRecord, RecordingError
from probes.events import Done
from probes.replay import Session
from probes.store import Keyframe


class GrowingImage(fmt.FileImage):
    """A ``FileImage`` that can read what its writer appended since (``grow``)."""

    def grow(self) -> int:
        """Read the bytes appended since the last read and index the records they complete (from where the last
        whole record ended: the cost is the new bytes, not the file); returns how many new records there are.
        ``RecordingError`` when the new bytes do not check out (the file was replaced or damaged); then nothing
        changes. A file already damaged where it was read stays read up to its damage (nothing after it is a
        continuation)."""
        if self.damage is not None:
            return 0
        more = fmt.read_bounded(self.path, len(self.data))  # the same refusals as the first read, and its size limit
        if not more:
            return 0
        if not isinstance(self.data, bytearray):
            # grown in place from now on (amortised, not a copy of the file per read): only this reader's thread
            # resizes it, and no view of it outlives a call (readers slice copies out of it)
            self.data = bytearray(self.data)
        known, size, old_tail = len(self.refs), len(self.data), self.incomplete_tail
        saved = dict(self._last_t), self._ended, self.session_tag
        self.data += more
        # index from where the last whole record ended: the same checks as opening the file
        self.incomplete_tail = self._index_records(size - old_tail)
        if self.damage is not None:  # the new bytes do not continue the session: undo, say why
            problem, first_new = str(self.damage), size - old_tail
            del self.refs[known:]
            for key in [key for key, offset in self._seen.items() if offset >= first_new]:
                del self._seen[key]
            self._last_t, self._ended, self.session_tag = saved
            self.data, self.incomplete_tail, self.damage = self.data[:size], old_tail, None
            raise RecordingError(self.path, problem)
        for ref in self.refs[known:]:
            self.by_kind[ref.kind].append(ref)
        return len(self.refs) - known


class GrowingSession(Session):
    """A recording read while it is written. ``refresh()`` picks up what was appended; ``growing`` is False once
    its END record is in (nothing more will come)."""

    def __init__(self, image: GrowingImage, label: str = "") -> None:
        super().__init__(image, label)
        self._taken = len(image.refs)

    @classmethod
    def open(cls, path: str | os.PathLike, label: str = "") -> "GrowingSession":
        """Open what has been written so far; ``RecordingError`` (one line) when it is not a recording, or has no
        metadata record yet (a writer that just created the file: try again)."""
        return cls(GrowingImage(path), label)

    @property
    def growing(self) -> bool:
        return self.summary is None

    @property
    def size(self) -> int:
        """Bytes read so far."""
        return len(self._image.data)

    def refresh(self) -> int:
        """Fold the records appended since the last refresh into the model; returns how many were new."""
        if not self.growing or not self._image.grow():
            return 0
        new = self._image.refs[self._taken:]
        self._taken = len(self._image.refs)
        self._take(new)
        return len(new)

    def _take(self, refs: list[fmt.RecordRef]) -> None:
        """New records, in file order, into the read model (the same routing and order checks as opening a
        recording: ``Session._load``); every record is decoded and checked before anything is folded in."""
        columns, events, summaries, keyframes = [], [], [], []
        for position, ref in enumerate(refs):
            try:
                self._route(ref, columns, events, summaries, keyframes)
            except ImpossibleRecord as exc:  # damage: the records before it are folded in, nothing after it
                self._image.cut(len(self._image.refs) - len(refs) + position, exc.offset, exc.problem)
                self.damage, self.records_read = self._image.damage, len(self._image.refs)
                self._taken, refs = len(self._image.refs), refs[:position]
                break
        self._check_order(columns, summaries)
        for block in columns:
            self.samples.extend(block)
        for event in sorted(events, key=lambda e: e.t):
            self.add_event(event)
        if summaries:
            self.snapshots = self.snapshots + summaries
        if keyframes:
            self.keyframes = self.keyframes + keyframes
        ends = [ref for ref in refs if ref.kind == fmt.END]
        if ends:
            end = self._decode(ends[-1])
            self.summary = Done(t=end.t, summary=end.summary)

    def _route(self, ref: fmt.RecordRef, columns: list, events: list, summaries: list, keyframes: list) -> None:
        """One new record decoded into the list its kind goes to (ops stay byte ranges)."""
        if ref.kind == fmt.META:
            raise RecordingError(self.path, f"second metadata record at byte {ref.offset}")
        if ref.kind == fmt.SAMPLES:
            columns.append(self._decode(ref).columns)
        elif ref.kind == fmt.EVENTS:
            decoded = self._decode(ref)
            events += decoded.events
            for kind, count in decoded.skipped.items():
                self.skipped_events[kind] = self.skipped_events.get(kind, 0) + count
        elif ref.kind == fmt.SNAPSHOTS:
            summaries += self._decode(ref)
        elif ref.kind == fmt.KEYFRAME:
            keyframes.append(Keyframe(ref.t, self._keyframe_loader(ref)))
        elif ref.kind == fmt.OPS:
            self._all_ops = None  # the op log grew: decode it again when all of it is asked for
        elif ref.kind == fmt.END:
            self._decode(ref)  # checked here, in file order (read again below)

    def _check_order(self, columns: list[dict], summaries: list) -> None:
        """New sample times and snapshot summaries continue the known ones in order (what opening checks)."""
        last = self.samples.at(len(self.samples) - 1).t if len(self.samples) else None  # not a copy of the column
        times = ([] if last is None else [last]) + [t for block in columns for t in block.get("t") or []]
        if any(b < a for a, b in zip(times, times[1:])):
            raise RecordingError(self.path, "samples out of time order")
        joined = self.snapshots[-1:] + summaries
        if any(b.t < a.t or b.op_index < a.op_index for a, b in zip(joined, joined[1:])):
            raise RecordingError(self.path, "snapshot summaries out of time or op order")

    def _ops_known(self) -> int:
        return len(self._image.by_kind[fmt.OPS])  # rebuilt snapshots are stale once more op records arrive
