"""Low-level session file format: a file header followed by length-prefixed, CRC-checked records.

Layout (little endian; see docs/recording-format.md for the decision and its trade-offs)::

    file header (16 bytes):  b"SLABSCOPEREC" | u16 format version | u16 reserved (0)
    record header (20 bytes): b"\\xa5R" | u8 kind | u8 flags | u32 payload length | f64 t | u32 crc32
    payload: UTF-8 JSON (zlib-compressed when flags & FLAG_ZLIB)

The CRC covers the first 16 header bytes and the payload. Records are appended with one ``os.write`` per batch,
so a SIGKILL at any instant leaves every earlier record intact and at most one torn record at the tail, which
the reader detects (it runs past the end of the file) and ignores, marking the file incomplete. Anything else
that does not check out (bad magic, bad marker, CRC mismatch, undecodable payload) is a ``RecordingError``.

This module owns only bytes <-> records; ``probes.recording`` owns what the records mean.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from typing import NamedTuple

from probes.errors import RecordingError

MAGIC = b"SLABSCOPEREC"
FORMAT_VERSION = 1
FILE_HEADER = struct.Struct("<12sHH")
RECORD_HEADER = struct.Struct("<2sBBIdI")
RECORD_MARKER = b"\xa5R"
FLAG_ZLIB = 1
MAX_PAYLOAD = 256 * 1024 * 1024
COMPRESS_OVER = 2048  # payloads above this many bytes are zlib-compressed (level 1: cheap for the writer)

# Record kinds.
META, SAMPLES, EVENTS, OPS, SNAPSHOTS, KEYFRAME, END = 1, 2, 3, 4, 5, 6, 7
KIND_NAMES = {META: "meta", SAMPLES: "samples", EVENTS: "events", OPS: "ops", SNAPSHOTS: "snapshots",
              KEYFRAME: "keyframe", END: "end"}


def encode_record(kind: int, t: float, payload_obj: object) -> bytes:
    """Serialise one record (header + payload) to bytes; pure function."""
    payload = json.dumps(payload_obj, separators=(",", ":")).encode()
    flags = 0
    if len(payload) > COMPRESS_OVER:
        payload = zlib.compress(payload, 1)
        flags |= FLAG_ZLIB
    head = RECORD_HEADER.pack(RECORD_MARKER, kind, flags, len(payload), float(t), 0)[:16]
    crc = zlib.crc32(payload, zlib.crc32(head))
    return head + struct.pack("<I", crc) + payload


class RecordRef(NamedTuple):
    """Where one record lives in the file; the payload is decoded on demand by ``FileImage.decode``."""

    kind: int
    t: float
    offset: int  # payload offset
    length: int
    flags: int


class RecordWriter:
    """Appends records to a new session file. Owns the file descriptor; every ``append`` is one ``os.write``."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as exc:
            raise RecordingError(self.path, f"cannot create recording: {exc.strerror}") from None
        self.bytes_written = 0
        self.records_written = 0
        self._write_all(FILE_HEADER.pack(MAGIC, FORMAT_VERSION, 0))

    def append(self, records: list[tuple[int, float, object]]) -> None:
        """Encode and write ``(kind, t, payload)`` records in one system call (all or a torn tail)."""
        if not records:
            return
        blob = b"".join(encode_record(kind, t, obj) for kind, t, obj in records)
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
    Raises ``RecordingError`` for anything that is not a (possibly torn) slabscope recording.
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
        if version > FORMAT_VERSION or version < 1:
            raise RecordingError(self.path, f"recording format v{version} is not supported "
                                            f"(this slabscope reads v1..v{FORMAT_VERSION})")
        return version

    def _index_records(self) -> int:
        """Walk record headers, verify CRCs, fill ``refs``; return the size of a torn tail (0 if none).

        This loop is what opening a long session costs (one iteration per record), hence the local names."""
        data, pos, end = self.data, FILE_HEADER.size, len(self.data)
        view = memoryview(data)
        unpack, hsize, crc32 = RECORD_HEADER.unpack_from, RECORD_HEADER.size, zlib.crc32
        refs, make, kinds = self.refs, RecordRef._make, KIND_NAMES
        while pos < end:
            if end - pos < hsize:
                return end - pos
            marker, kind, flags, length, t, crc = unpack(data, pos)
            if marker != RECORD_MARKER or kind not in kinds or length > MAX_PAYLOAD:
                raise RecordingError(self.path, f"corrupt record header at byte {pos}")
            start = pos + hsize
            stop = start + length
            if stop > end:
                return end - pos
            if crc32(view[start:stop], crc32(view[pos:pos + 16])) != crc:
                raise RecordingError(self.path, f"corrupt record at byte {pos} (checksum mismatch)")
            refs.append(make((kind, t, start, length, flags)))
            pos = stop
        return 0

    def decode(self, ref: RecordRef) -> object:
        """Decode one record's JSON payload; ``RecordingError`` if it does not decode."""
        raw = self.data[ref.offset:ref.offset + ref.length]
        try:
            if ref.flags & FLAG_ZLIB:
                raw = zlib.decompress(raw)
            return json.loads(raw)
        except (zlib.error, ValueError, RecursionError) as exc:
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise RecordingError(self.path, f"undecodable {KIND_NAMES[ref.kind]} record at byte "
                                            f"{ref.offset}: {problem}") from None

    def decode_lists(self, refs: list[RecordRef]) -> list:
        """Concatenate the list payloads of ``refs`` (one JSON parse for all uncompressed ones: opening a long
        session is dominated by per-call overhead otherwise). ``RecordingError`` if any payload is not a list."""
        parts = []
        for ref in refs:
            raw = self.data[ref.offset:ref.offset + ref.length]
            if ref.flags & FLAG_ZLIB:
                try:
                    raw = zlib.decompress(raw)
                except zlib.error:
                    self.decode(ref)  # raises the one-line error naming the record
            parts.append(raw)
        try:
            lists = json.loads(b"[" + b",".join(parts) + b"]") if parts else []
        except (ValueError, RecursionError):
            lists = [self.decode(ref) for ref in refs]  # locate and report the bad record
        out: list = []
        for ref, items in zip(refs, lists):
            if not isinstance(items, list):
                raise RecordingError(self.path, f"malformed {KIND_NAMES[ref.kind]} record at byte {ref.offset}")
            out.extend(items)
        return out
