"""Recorded sessions: ``Session.open(path)`` reads a session file into the read model (``probes.store``; mlx-free).

Opening reads the file (``probes.format.FileImage``: bounded, regular files only), verifies every record's
checksum and that it continues the session (format v2: its sequence number and session tag), and decodes
metadata, samples, events, snapshot summaries and the END summary through ``probes.codec``; ops and keyframes (the
bulky part) stay as byte ranges until a query needs them.

What lies past the valid prefix: a torn tail (writer killed mid-write) is ignored and reported by
``incomplete_tail_bytes``; any other damage (corruption, a zeroed tail, records out of sequence, duplicated or of
another session) is reported by ``damage`` (one line with its byte offset, and a ``RecordingDamage`` warning) and
the prefix is read, or raises ``RecordingError`` with ``open(path, strict=True)``. A malformed record inside the
prefix raises ``RecordingError`` (one line), at open or when the lazily decoded part is first read: content is never
guessed at.
"""

from __future__ import annotations

import bisect
import os
import warnings
import weakref

from pool import BlockBook, PoolError
from probes import bounds, codec
from probes import format as fmt
from probes.errors import ImpossibleRecord, RecordingDamage, RecordingError
from probes.events import Done
from probes.store import Keyframe, OpEntry, SessionModel

MAX_OP_WINDOWS = 16  # decoded op-record windows kept for seeks


class Session(SessionModel):
    """One recorded backend run. Build with ``Session.open(path)``; ``SessionModel`` has the queries."""

    def __init__(self, image: fmt.FileImage, label: str = "") -> None:
        super().__init__(label=label, source=image.path)
        self.path = image.path
        self.format_version = image.version
        self._image = image
        self.incomplete_tail_bytes = image.incomplete_tail
        self.damage = image.damage  # probes.damage.Damage past the valid prefix, None when intact
        self.records_read = len(image.refs)  # records of the valid prefix (all of them when intact)
        self._all_ops: list[OpEntry] | None = None
        self._op_windows: dict[tuple[int, int], list[OpEntry]] = {}
        self._load()

    @classmethod
    def open(cls, path: str | os.PathLike, label: str = "", strict: bool = False) -> "Session":
        """Open a session file; raises ``RecordingError`` (one line) if it is not a readable recording. A damaged
        file opens on its valid prefix with ``damage`` set and a ``RecordingDamage`` warning, or (``strict``)
        raises ``RecordingError``."""
        image = fmt.FileImage(path)
        if image.damage is not None and strict:
            raise RecordingError(image.path, str(image.damage))
        session = cls(image, label)
        if session.damage is not None:
            if strict:  # damage found while decoding: an impossible figure
                raise RecordingError(image.path, str(session.damage))
            warnings.warn(f"{session.path}: {session.damage}", RecordingDamage, stacklevel=2)
        return session

    def _decode(self, ref: fmt.RecordRef):
        return codec.decode(self._image, ref, self._bounds)

    def _load(self) -> None:
        image = self._image
        if not image.refs or image.refs[0].kind != fmt.META:
            why = f": {image.damage}" if image.damage else " (file truncated right after its header)"
            raise RecordingError(self.path, f"no metadata record{why}")
        self._bounds = bounds.DEFAULT_BOUNDS
        meta = self._decode(image.refs[0])
        if image.version >= 2 and fmt.session_tag(str(meta.get("session_id"))) != image.session_tag:
            raise RecordingError(self.path, "metadata names another session than its records")
        self.set_meta(meta)
        self._bounds = bounds.FigureBounds.of(self.meta)
        decoded = self._decode_prefix()
        if image.damage is not None and not any(ref.kind not in (fmt.META, fmt.END) for ref in image.refs):
            raise RecordingError(self.path, f"nothing readable after the metadata record: {image.damage}")
        ends = image.by_kind[fmt.END]
        if ends:
            end = decoded[ends[-1].offset]
            self.summary = Done(t=end.t, summary=end.summary)
        for ref in image.by_kind[fmt.SAMPLES]:
            self.samples.extend(decoded[ref.offset].columns)
        window = self.samples.window()
        if any(b < a for a, b in zip(window.t, window.t[1:])):
            raise RecordingError(self.path, "samples out of time order")
        self._load_events(decoded)
        self.snapshots = [record for ref in image.by_kind[fmt.SNAPSHOTS] for record in decoded[ref.offset]]
        if any(b.t < a.t or b.op_index < a.op_index for a, b in zip(self.snapshots, self.snapshots[1:])):
            raise RecordingError(self.path, "snapshot summaries out of time or op order")
        self.keyframes = [Keyframe(ref.t, self._keyframe_loader(ref)) for ref in image.by_kind[fmt.KEYFRAME]]

    def _decode_prefix(self) -> dict[int, object]:
        """Decode the records read at open (all but the metadata, ops and keyframes), in file order; returns their
        payloads by payload offset. A record holding an impossible figure ends the valid prefix there, like a bad
        checksum (``FileImage.cut``; ``damage`` says where and what), so no figure is computed from it."""
        image, out = self._image, {}
        for index, ref in enumerate(image.refs):
            if ref.kind in (fmt.META, fmt.OPS, fmt.KEYFRAME):
                continue
            try:
                out[ref.offset] = self._decode(ref)
            except ImpossibleRecord as exc:
                image.cut(index, exc.offset, exc.problem)
                self.damage, self.records_read, self.incomplete_tail_bytes = image.damage, len(image.refs), 0
                break
        return out

    def _load_events(self, decoded: dict[int, object]) -> None:
        events = []
        for ref in self._image.by_kind[fmt.EVENTS]:
            decoded_events = decoded[ref.offset]
            events += decoded_events.events
            for kind, count in decoded_events.skipped.items():
                self.skipped_events[kind] = self.skipped_events.get(kind, 0) + count
        for event in sorted(events, key=lambda e: e.t):  # stable: batches are in emission order already
            self.add_event(event)

    def _keyframe_loader(self, ref: fmt.RecordRef):
        owner, path = weakref.ref(self), self.path  # not the session: no reference cycle (it owns its keyframes)

        def load():
            session = owner()
            if session is None:
                raise RecordingError(path, "the session this keyframe belongs to is gone")
            record = session._decode(ref)
            summary = session.summary_at(record.t)
            if record.t != ref.t or (summary is not None and summary.t == record.t
                                     and summary.op_index != record.op_index):
                raise RecordingError(path, f"malformed keyframe record at byte {ref.offset}: its time or "
                                           "op_index disagrees with the record header or its snapshot summary")
            if record.book_state is not None:
                try:
                    BlockBook.from_state(record.book_state, check=True)
                except PoolError as exc:
                    raise RecordingError(path, f"malformed keyframe record at byte {ref.offset}: {exc}") \
                        from None
                if record.book_state.config.num_layers != record.snapshot.num_layers:
                    raise RecordingError(path, f"malformed keyframe record at byte {ref.offset}: the book "
                                               "and the snapshot disagree on the number of layers")
            return record

        return load

    @property
    def complete(self) -> bool:
        """True when the worker closed the session normally (an END record) and nothing damaged follows it."""
        return self.summary is not None and self.damage is None

    @property
    def status(self) -> str:
        """As ``SessionModel.status``, and 'damaged' for a file read up to its damage."""
        if self.error is None and self.damage is not None:
            return "damaged"
        return super().status

    @property
    def duration(self) -> float:
        if self.summary is not None:
            window = self.samples.window()
            return max(self.summary.t, window.t[-1] if len(window) else 0.0)
        return super().duration

    # ---- the op log, decoded on demand -----------------------------------------------------------------------
    def _entries(self, refs: list[fmt.RecordRef]) -> list[OpEntry]:
        out: list[OpEntry] = []
        for ref in refs:
            record = self._decode(ref)
            out += [OpEntry(record.first + k, t, op) for k, (t, op) in enumerate(zip(record.t, record.ops))]
        return out

    def all_ops(self) -> list[OpEntry]:
        """Every recorded pool op in order (decoded on first use; what-if replays need them all)."""
        if self._all_ops is None:
            ops = self._entries(self._image.by_kind[fmt.OPS])
            if any(entry.i != i for i, entry in enumerate(ops)):
                raise RecordingError(self.path, "op records out of sequence (numbering has gaps or repeats)")
            self._check_op_indexes(ops)
            self._all_ops = ops
        return self._all_ops

    def _check_op_indexes(self, ops: list[OpEntry]) -> None:
        """Every snapshot's ``op_index`` (ops before it) fits the op log: the ops before it are not later than it
        and the ops from it on not earlier (ops stamped at its very instant may fall on either side)."""
        for record in self.snapshots:
            n = record.op_index
            if n > len(ops) or (n and ops[n - 1].t > record.t) or (n < len(ops) and ops[n].t < record.t):
                raise RecordingError(self.path, f"the snapshot at {record.t:.3f} s counts {n} ops before it, which "
                                                f"the op log ({len(ops)} ops) does not match")

    def _ops_known(self) -> int:
        return -1  # a recording does not grow: rebuilt snapshots stay valid

    def _window(self, t0: float, t1: float | None) -> list[OpEntry]:
        """Ops of the records that can hold ops stamped in [t0, t1] (records are indexed by their first op's
        time: start from the last record starting at or before t0)."""
        if self._all_ops is not None:
            return self._all_ops
        refs = self._image.by_kind[fmt.OPS]
        lo = max(0, bisect.bisect_right(refs, t0, key=lambda r: r.t) - 1)
        hi = len(refs) if t1 is None else bisect.bisect_right(refs, t1, key=lambda r: r.t)
        key = (lo, hi)
        if key not in self._op_windows:
            if len(self._op_windows) >= MAX_OP_WINDOWS:
                self._op_windows.clear()
            entries = self._entries(refs[lo:hi])
            if any(b.i != a.i + 1 for a, b in zip(entries, entries[1:])):
                raise RecordingError(self.path, "op records out of sequence (numbering has gaps or repeats)")
            self._op_windows[key] = entries
        return self._op_windows[key]

    def ops_range(self, op_index: int, t: float) -> list[OpEntry]:
        """Ops numbered ``op_index`` and later, at or before ``t``, decoding only the op records that can hold them
        (from the record holding op ``op_index``'s keyframe time, to ``t``)."""
        return [e for e in self._window(self._op_time_hint(op_index), t) if e.i >= op_index and e.t <= t]

    def ops_between(self, t0: float, t1: float | None) -> list[OpEntry]:
        return [e for e in self._window(t0, t1) if e.t >= t0 and (t1 is None or e.t <= t1)]

    def _op_time_hint(self, op_index: int) -> float:
        """Time of a loaded keyframe that starts at ``op_index`` (ops after it are not older than it), else 0."""
        for keyframe in self.keyframes:
            if keyframe.is_loaded and keyframe.load().op_index == op_index:
                return keyframe.t
        return 0.0
