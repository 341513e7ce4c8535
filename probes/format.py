"""Low-level session file format: a file header followed by length-prefixed, CRC-checked records.

Layout (little endian; see docs/recording-format.md for the decision and its trade-offs)::

    file header (16 bytes):   b"SLABSCOPEREC" | u16 format version | u16 reserved (0)
    record header, v2+ (28 b): b"\\xa5R" | u8 kind | u8 flags | u32 payload length | u32 sequence | u32 session tag
                              | f64 t | u32 crc32
    record header, v1 (20 b): b"\\xa5R" | u8 kind | u8 flags | u32 payload length | f64 t | u32 crc32
    payload: msgpack (v2, v3) or UTF-8 JSON (v1), zlib-compressed when flags & FLAG_ZLIB

v3 differs from v2 in its payloads only (``probes.codec``: keyframes hold the pool's rows once, not once per
layer), so this module reads both the same way.

The CRC covers the header before it and the payload. v2 numbers the records of a file 0, 1, 2, ... (META is 0) and
stamps each with its session's tag (a CRC of the session id in the META record), so a duplicated, reordered,
missing or foreign record is detected while indexing, before any payload is decoded. Records are appended with
one ``os.write`` per batch, so a SIGKILL at any instant leaves every earlier record intact and at most one torn
record at the tail, which the reader detects (it runs past the end of the file) and ignores, marking the file
incomplete. Anything else that does not check out is a ``RecordingError``.

This module owns only bytes <-> records (headers, checksums, compression); ``probes.codec`` owns payloads.
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from typing import NamedTuple

from probes import limits
from probes.damage import Damage, classify, next_valid_record
from probes.errors import RecordingError

MAGIC = b"SLABSCOPEREC"
FORMAT_VERSION = 3
OLDEST_VERSION = 1
FILE_HEADER = struct.Struct("<12sHH")
RECORD_HEADER = struct.Struct("<2sBBIIIdI")  # v2
RECORD_HEADER_V1 = struct.Struct("<2sBBIdI")
RECORD_MARKER = b"\xa5R"
FLAG_ZLIB = 1
MAX_PAYLOAD = limits.MAX_RECORD_BYTES  # stored and inflated
COMPRESS_OVER = 2048  # payloads above this many bytes are zlib-compressed (level 1: cheap for the writer)

# Record kinds.
META, SAMPLES, EVENTS, OPS, SNAPSHOTS, KEYFRAME, END = 1, 2, 3, 4, 5, 6, 7
KIND_NAMES = {META: "meta", SAMPLES: "samples", EVENTS: "events", OPS: "ops", SNAPSHOTS: "snapshots",
              KEYFRAME: "keyframe", END: "end"}


def session_tag(session_id: str) -> int:
    """The u32 every record of a session carries (a CRC of its id)."""
    return zlib.crc32(session_id.encode())


def encode_record(kind: int, t: float, payload: bytes, seq: int, tag: int) -> bytes:
    """One v2 record (header + payload bytes, compressed when large); pure function."""
    flags = 0
    if len(payload) > COMPRESS_OVER:
        payload = zlib.compress(payload, 1)
        flags |= FLAG_ZLIB
    head = RECORD_HEADER.pack(RECORD_MARKER, kind, flags, len(payload), seq, tag, float(t), 0)[:-4]
    crc = zlib.crc32(payload, zlib.crc32(head))
    return head + struct.pack("<I", crc) + payload


class RecordRef(NamedTuple):
    """Where one record lives in the file; the payload is read on demand by ``FileImage.payload``."""

    kind: int
    t: float
    offset: int  # payload offset
    length: int
    flags: int
    seq: int     # record number (v2; v1: position in the file)


class RecordWriter:
    """Appends v2 records of one session to a new file: the one writer of its path (``probes.outfile``). Owns the
    file descriptor and the record numbering; every ``append`` is one ``os.write``.

    The file is created exclusively (an existing file is refused, unless ``force``: then replaced when no live
    writer holds it) and locked until ``close``; or, with ``claim_token``, the empty file another process claimed
    for this run is adopted (``probes.outfile.adopt``). ``OutputError`` (one line) when neither is possible."""

    def __init__(self, path: str | os.PathLike, session_id: str, *, claim_token=None, force: bool = False) -> None:
        from probes import outfile

        self.path = os.fspath(path)
        if claim_token is not None:
            self._fd = outfile.adopt(self.path, claim_token)
        else:
            self._fd = outfile.claim(self.path, force=force).fd  # the lock lives as long as this descriptor
        self.tag = session_tag(session_id)
        self.bytes_written = 0
        self.records_written = 0
        self._write_all(FILE_HEADER.pack(MAGIC, FORMAT_VERSION, 0))

    def append(self, records: list[tuple[int, float, bytes]]) -> None:
        """Write ``(kind, t, payload bytes)`` records in one system call (all or a torn tail)."""
        if not records:
            return
        first = self.records_written
        blob = b"".join(encode_record(kind, t, payload, first + i, self.tag)
                        for i, (kind, t, payload) in enumerate(records))
        self._write_all(blob)
        self.records_written += len(records)

    def _write_all(self, blob: bytes) -> None:
        view = memoryview(blob)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
            self.bytes_written += n

    def close(self, fsync: bool = True) -> None:
        """Close the file (fsync it and its directory first, so a machine crash after a clean stop loses nothing;
        closing drops the writer lock). Idempotent."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if fsync:
                from probes.outfile import fsync_directory

                os.fsync(fd)
                fsync_directory(os.path.dirname(self.path))
        finally:
            os.close(fd)


def encode_file(records: list[tuple[int, float, bytes]], session_id: str) -> bytes:
    """A whole v2 file of ``(kind, t, payload bytes)`` records, as ``RecordWriter`` would write it (for a file
    written whole, then published: ``probes.outfile.write_atomically``)."""
    tag = session_tag(session_id)
    return FILE_HEADER.pack(MAGIC, FORMAT_VERSION, 0) + b"".join(
        encode_record(kind, t, payload, seq, tag) for seq, (kind, t, payload) in enumerate(records))


class FileImage:
    """A session file read into memory and indexed: ``refs`` lists the records of its valid prefix, in order.

    The prefix ends at the first record that does not check out (header, checksum) or does not continue the
    session (sequence number, session tag, a second META, a record after END, a duplicate, a SAMPLES/OPS/
    SNAPSHOTS/KEYFRAME record older than the previous one of its kind, a time that is not a session time).
    ``incomplete_tail`` is the size of a torn last record (a writer killed mid-write: normal after a crash);
    ``damage`` (``probes.damage.Damage``, None when intact) says what lies past the prefix otherwise, with its
    byte offset. Raises ``RecordingError`` for what is not a slabscope recording at all: not a regular file, over
    the size limit, bad magic, an unsupported version.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self.data = read_bounded(self.path)
        self.version = self._check_file_header()
        self.refs: list[RecordRef] = []
        self.session_tag: int | None = None  # the tag every record carries (v2; None for v1)
        self.damage: Damage | None = None
        # continuity state of the walk (kept so a walk over appended bytes continues it: probes.follow)
        self._last_t: dict[int, float] = {}            # kind -> time of its last record (ordered kinds)
        self._seen: dict[tuple, int] = {}              # (kind, t, length) -> payload offset: duplicate check
        self._ended = False                            # an END record was indexed
        self.incomplete_tail = self._index_records()
        self.by_kind: dict[int, list[RecordRef]] = {kind: [] for kind in KIND_NAMES}
        for ref in self.refs:
            self.by_kind[ref.kind].append(ref)

    def _check_file_header(self) -> int:
        data = self.data
        if len(data) < FILE_HEADER.size:
            if MAGIC.startswith(data[: len(MAGIC)]) and data:
                raise RecordingError(self.path, "truncated before the end of the file header")
            raise RecordingError(self.path, "not a slabscope recording (empty or too short)")
        magic, version, _reserved = FILE_HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise RecordingError(self.path, "not a slabscope recording (bad magic bytes)")
        if version > FORMAT_VERSION or version < OLDEST_VERSION:
            raise RecordingError(self.path, f"recording format v{version} is not supported "
                                            f"(this slabscope reads v{OLDEST_VERSION}..v{FORMAT_VERSION})")
        return version

    def _index_records(self, pos: int = FILE_HEADER.size) -> int:
        """Walk record headers from byte ``pos`` (a record start: the first one, or where the last indexed record
        ended, for a file that grew), verify CRCs and continuity, append to ``refs``; return the size of a torn
        tail (0 if none), setting ``damage`` for anything else that ends the prefix. The continuity state (last
        time per kind, records seen, END seen) lives on the image so a later walk continues it. This loop is what
        opening a long session costs (one iteration per record), hence the local names."""
        data, end = self.data, len(self.data)
        v2 = self.version >= 2
        header = RECORD_HEADER if v2 else RECORD_HEADER_V1
        view = memoryview(data)
        unpack, hsize, crc32 = header.unpack_from, header.size, zlib.crc32
        refs, make, kinds = self.refs, RecordRef._make, KIND_NAMES
        ordered, last_t, seen, max_t = _ORDERED, self._last_t, self._seen, limits.MAX_SESSION_S
        ended = self._ended
        while pos < end:
            if end - pos < hsize:
                return self._stop(pos, "incomplete record header", RECORD_MARKER.startswith(data[pos:pos + 2]))
            if v2:
                marker, kind, flags, length, seq, tag, t, crc = unpack(data, pos)
            else:
                marker, kind, flags, length, t, crc = unpack(data, pos)
                seq, tag = len(refs), None
            if marker != RECORD_MARKER or kind not in kinds or length > MAX_PAYLOAD:
                return self._stop(pos, f"corrupt record header at byte {pos}", False)
            start = pos + hsize
            stop = start + length
            if stop > end:
                return self._stop(pos, f"record at byte {pos} runs past the end of the file", True)
            if crc32(view[start:stop], crc32(view[pos:start - 4])) != crc:
                return self._stop(pos, f"corrupt record at byte {pos} (checksum mismatch)", False)
            if self.session_tag is None:
                self.session_tag = tag
            index = len(refs)
            # does it continue the session? (the common case in one expression; _discontinuity says why not)
            if ended or (v2 and (tag != self.session_tag or seq != index)) or (kind == META and index) or \
                    not 0.0 <= t <= max_t or (kind in ordered and t < last_t.get(kind, 0.0)):  # NaN fails too
                self.damage = Damage(pos, end - pos, _discontinuity(pos, kind, t, seq, tag, self.session_tag,
                                                                    index, ended, last_t))
                return 0
            first = seen.setdefault((kind, t, length), start)
            if first != start and data[first:first + length] == data[start:stop]:
                self.damage = Damage(pos, end - pos, f"record at byte {pos} duplicates the one at byte "
                                                     f"{first - hsize}")
                return 0
            if kind in ordered:
                last_t[kind] = t
            if kind == END:
                ended = self._ended = True
            refs.append(make((kind, t, start, length, flags, seq)))
            pos = stop
        return 0

    def cut(self, index: int, start: int, problem: str) -> None:
        """End the valid prefix before record ``index`` (which starts at byte ``start``): a CRC-valid record that
        does not check out once decoded (an impossible figure, ``probes.bounds``) is damage like a bad checksum."""
        self.damage = Damage(start, len(self.data) - start, problem)
        self.incomplete_tail = 0
        del self.refs[index:]
        self.by_kind = {kind: [ref for ref in self.refs if ref.kind == kind] for kind in KIND_NAMES}

    def _stop(self, pos: int, problem: str, torn: bool) -> int:
        """End the prefix at ``pos``: a torn tail (returns its size) or damage (sets ``damage``, returns 0)."""
        header = RECORD_HEADER if self.version >= 2 else RECORD_HEADER_V1
        follows = next_valid_record(self.data, pos, header, RECORD_MARKER, KIND_NAMES, MAX_PAYLOAD)
        self.damage = classify(self.data, pos, problem, torn, follows)
        return len(self.data) - pos if self.damage is None else 0

    def payload(self, ref: RecordRef) -> bytes:
        """One record's payload bytes, decompressed; ``RecordingError`` if it does not inflate, or inflates past
        ``MAX_PAYLOAD`` (a zlib bomb is stopped there, not inflated whole)."""
        raw = self.data[ref.offset:ref.offset + ref.length]
        if not ref.flags & FLAG_ZLIB:
            return raw
        what = f"{KIND_NAMES[ref.kind]} record at byte {ref.offset}"
        inflater = zlib.decompressobj()
        try:
            out = inflater.decompress(raw, MAX_PAYLOAD)
        except zlib.error as exc:
            raise RecordingError(self.path, f"undecodable {what}: {exc}") from None
        if inflater.unconsumed_tail:
            raise RecordingError(self.path, f"{what} inflates past {MAX_PAYLOAD:,} bytes (the limit for one record)")
        if not inflater.eof:
            raise RecordingError(self.path, f"undecodable {what}: incomplete compressed data")
        return out


def read_bounded(path: str, offset: int = 0) -> bytes:
    """The bytes of the regular file at ``path``, refused (``RecordingError``) before reading when it is not a
    regular file (a FIFO would block, /dev/zero never ends), when it is larger than ``limits.max_file_bytes()``,
    or when it does not start with the magic bytes (a 1 GiB sparse file is refused after 16 bytes). Opened
    non-blocking, so a FIFO without a writer cannot block the open itself. ``offset``: the bytes from there on
    (what a followed file's writer appended; its start was checked when it was first read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise RecordingError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RecordingError(path, f"not a regular file ({_file_type(info.st_mode)}): a recording is a file")
        if offset == 0:
            head = _read_upto(fd, FILE_HEADER.size)
            if len(head) < FILE_HEADER.size or not head.startswith(MAGIC):
                return head  # the header check names the problem; nothing more is read
        if info.st_size > limits.max_file_bytes():
            raise RecordingError(path, f"{info.st_size:,} bytes, over the {limits.max_file_bytes():,}-byte limit "
                                       "for a recording (SLABSCOPE_MAX_RECORDING_MIB raises it)")
        os.lseek(fd, offset, os.SEEK_SET)
        return _read_upto(fd, max(0, info.st_size - offset))  # what was there at open (a live file grows)
    except OSError as exc:
        raise RecordingError(path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _read_upto(fd: int, count: int) -> bytes:
    """At most ``count`` bytes from ``fd`` (fewer at the end of the file): reads until it has them or the file ends."""
    parts = []
    left = count
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


_ORDERED = frozenset((SAMPLES, OPS, SNAPSHOTS, KEYFRAME))  # one clock, one stream: never older than the last


def _discontinuity(pos: int, kind: int, t: float, seq: int, tag: int | None, session_tag: int | None, index: int,
                   ended: bool, last_t: dict[int, float]) -> str:
    """Why the CRC-valid record at ``pos`` (the ``index``-th) does not continue the session, in words."""
    if tag != session_tag:
        return f"record at byte {pos} belongs to another session (tag {tag:08x}, this session's is {session_tag:08x})"
    if seq != index:
        return f"record at byte {pos} is out of sequence (number {seq}, expected {index}): a duplicated, reordered " \
               "or missing record"
    if ended:
        return f"record at byte {pos} follows the end record (records appended after the session ended)"
    if kind == META:
        return f"second metadata record at byte {pos} (another session's records appended)"
    problem = limits.time_problem(t)
    if problem is not None:
        return f"record at byte {pos}: {problem}"
    return f"{KIND_NAMES[kind]} record at byte {pos} is older than the previous one ({t:.3f} s < " \
           f"{last_t[kind]:.3f} s): reordered records"
