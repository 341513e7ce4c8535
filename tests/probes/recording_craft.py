"""Crafting hostile recordings: a session file as a list of raw records that tests edit and write back with valid
checksums (so the damage is in the content or the order, never caught by the CRC alone).

``RawRecord`` holds a record's header fields and its payload decoded to plain data (msgpack for v2, JSON for v1);
``parse`` reads a file's bytes into them, ``build`` writes them back (compressing as the writer does, numbering
v2 records as given). Nothing here imports slabscope's readers: the readers are what the crafted files attack.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, replace

import msgspec

from probes import format as fmt


@dataclass
class RawRecord:
    kind: int
    t: float
    payload: object   # plain data (dicts, lists, numbers, strings)
    seq: int = 0      # v2 only
    tag: int = 0      # v2 only
    raw: bytes | None = None  # payload bytes as stored (uncompressed); None: encode ``payload``


def _decode(version: int, raw: bytes):
    return msgspec.msgpack.decode(raw) if version >= 2 else json.loads(raw)


def parse(blob: bytes) -> tuple[int, list[RawRecord]]:
    """(format version, records) of a valid file's bytes."""
    _magic, version, _ = fmt.FILE_HEADER.unpack_from(blob, 0)
    header = fmt.RECORD_HEADER if version >= 2 else fmt.RECORD_HEADER_V1
    pos, out = fmt.FILE_HEADER.size, []
    while pos < len(blob):
        if version >= 2:
            _m, kind, flags, length, seq, tag, t, _crc = header.unpack_from(blob, pos)
        else:
            _m, kind, flags, length, t, _crc = header.unpack_from(blob, pos)
            seq = tag = 0
        raw = blob[pos + header.size: pos + header.size + length]
        if flags & fmt.FLAG_ZLIB:
            raw = zlib.decompress(raw)
        out.append(RawRecord(kind, t, _decode(version, raw), seq, tag, raw))
        pos += header.size + length
    return version, out


def encode_payload(version: int, record: RawRecord) -> bytes:
    if record.raw is not None:
        return record.raw
    if version >= 2:
        return msgspec.msgpack.encode(record.payload)
    return json.dumps(record.payload, allow_nan=True).encode()


def record_bytes(version: int, record: RawRecord, compress: bool | None = None) -> bytes:
    """One record with a valid CRC; ``compress`` None: as the writer does (payloads over 2 KiB)."""
    payload = encode_payload(version, record)
    flags = 0
    if compress or (compress is None and len(payload) > fmt.COMPRESS_OVER):
        payload, flags = zlib.compress(payload, 1), fmt.FLAG_ZLIB
    if version >= 2:
        head = fmt.RECORD_HEADER.pack(fmt.RECORD_MARKER, record.kind, flags, len(payload), record.seq, record.tag,
                                      float(record.t), 0)[:-4]
    else:
        head = fmt.RECORD_HEADER_V1.pack(fmt.RECORD_MARKER, record.kind, flags, len(payload), float(record.t), 0)[:-4]
    return head + struct.pack("<I", zlib.crc32(payload, zlib.crc32(head))) + payload


def build(version: int, records: list[RawRecord], renumber: bool = True) -> bytes:
    """A file of ``records``; ``renumber``: v2 sequence numbers 0, 1, 2... and every record tagged like the first
    (a consistent file whatever the list's order), else as the records say."""
    if renumber and version >= 2 and records:
        records = [replace(r, seq=i, tag=records[0].tag) for i, r in enumerate(records)]
    return fmt.FILE_HEADER.pack(fmt.MAGIC, version, 0) + b"".join(record_bytes(version, r) for r in records)


def edited(record: RawRecord, payload: object, t: float | None = None) -> RawRecord:
    """``record`` with a new payload (and header time)."""
    return replace(record, payload=payload, raw=None, t=record.t if t is None else t)


def first(records: list[RawRecord], kind: int) -> int:
    """Index of the first record of ``kind``."""
    return next(i for i, r in enumerate(records) if r.kind == kind)
