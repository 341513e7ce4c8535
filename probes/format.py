"""Low-level session file format: a file header followed by length-prefixed, CRC-checked records.

Layout (little endian; see docs/recording-format.md for the decision and its trade-offs)::

    file header (16 bytes):   b"SLABSCOPEREC" | u16 format version | u16 reserved (0)
    record header, v2 (28 b): b"\\xa5R" | u8 kind | u8 flags | u32 payload length | u32 sequence | u32 session tag
                              | f64 t | u32 crc32
    record header, v1 (20 b): b"\\xa5R" | u8 kind | u8 flags | u32 payload length | f64 t | u32 crc32
    payload: msgpack (v2) or UTF-8 JSON (v1), zlib-compressed when flags & FLAG_ZLIB

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
import struct
import zlib
from typing import NamedTuple

from probes.errors import RecordingError

MAGIC = b"SLABSCOPEREC"
FORMAT_VERSION = 2
OLDEST_VERSION = 1
FILE_HEADER = struct.Struct("<12sHH")
RECORD_HEADER = struct.Struct("<2sBBIIIdI")  # v2
RECORD_HEADER_V1 = struct.Struct("<2sBBIdI")
RECORD_MARKER = b"\xa5R"
FLAG_ZLIB = 1
MAX_PAYLOAD = 256 * 1024 * 1024
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
    """Appends v2 records of one session to a new file. Owns the file descriptor and the record numbering; every
    ``append`` is one ``os.write``."""

    def __init__(self, path: str | os.PathLike, session_id: str) -> None:
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as exc:
            raise RecordingError(self.path, f"cannot create recording: {exc.strerror}") from None
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
        """Close the file (fsync first so a machine crash after a clean stop loses nothing). Idempotent."""
        if self._fd is None:
            return
        if fsync:
            os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None


class FileImage:
    """A session file read into memory and indexed: ``refs`` lists every valid record in order.

    ``incomplete_tail`` is the number of trailing bytes that form a torn record (a writer killed mid-write).
    Raises ``RecordingError`` for anything that is not a (possibly torn) slabscope recording, and (v2) for a
    record out of sequence or from another session.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        try:
            with open(self.path, "rb") as fh:
                self.data = fh.read()
        except OSError as exc:
            raise RecordingError(self.path, f"cannot read: {exc.strerror or exc}") from None
        self.version = self._check_file_header()
        self.refs: list[RecordRef] = []
        self.session_tag: int | None = None
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
        ended), verify CRCs (and v2 sequence numbers and session tags), append to ``refs``; return the size of a
        torn tail (0 if none). This loop is what opening a long session costs (one iteration per record), hence
        the local names."""
        data, end = self.data, len(self.data)
        v2 = self.version >= 2
        header = RECORD_HEADER if v2 else RECORD_HEADER_V1
        view = memoryview(data)
        unpack, hsize, crc32 = header.unpack_from, header.size, zlib.crc32
        refs, make, kinds = self.refs, RecordRef._make, KIND_NAMES
        while pos < end:
            if end - pos < hsize:
                return end - pos
            if v2:
                marker, kind, flags, length, seq, tag, t, crc = unpack(data, pos)
            else:
                marker, kind, flags, length, t, crc = unpack(data, pos)
                seq, tag = len(refs), None
            if marker != RECORD_MARKER or kind not in kinds or length > MAX_PAYLOAD:
                raise RecordingError(self.path, f"corrupt record header at byte {pos}")
            start = pos + hsize
            stop = start + length
            if stop > end:
                return end - pos
            if crc32(view[start:stop], crc32(view[pos:start - 4])) != crc:
                raise RecordingError(self.path, f"corrupt record at byte {pos} (checksum mismatch)")
            if v2:
                self._check_sequence(pos, seq, tag)
            refs.append(make((kind, t, start, length, flags, seq)))
            pos = stop
        return 0

    def _check_sequence(self, pos: int, seq: int, tag: int) -> None:
        if self.session_tag is None:
            self.session_tag = tag
        elif tag != self.session_tag:
            raise RecordingError(self.path, f"record at byte {pos} belongs to another session "
                                            f"(tag {tag:08x}, this session's is {self.session_tag:08x})")
        if seq != len(self.refs):
            raise RecordingError(self.path, f"record at byte {pos} is out of sequence (number {seq}, expected "
                                            f"{len(self.refs)}): a duplicated, reordered or missing record")

    def payload(self, ref: RecordRef) -> bytes:
        """One record's payload bytes, decompressed; ``RecordingError`` if it does not inflate."""
        raw = self.data[ref.offset:ref.offset + ref.length]
        if not ref.flags & FLAG_ZLIB:
            return raw
        try:
            return zlib.decompress(raw)
        except zlib.error as exc:
            raise RecordingError(self.path, f"undecodable {KIND_NAMES[ref.kind]} record at byte {ref.offset}: "
                                            f"{exc}") from None
