"""What is wrong past the valid prefix of a session file, said in one line (mlx-free).

The reader (``probes.format.FileImage``) keeps every record up to the first one that does not check out or does
not continue the session, and hands the rest here to be classified:

* a **torn tail**: the writer was killed mid-write. The last record is incomplete (its header, or its payload,
  runs past the end of the file) and nothing valid follows. Normal after a crash: the file is incomplete, not
  damaged (``Damage`` is None, the reader reports the torn bytes).
* a **zeroed tail**: the file ends in zero bytes (a machine crash before the file system wrote the data, or zeros
  appended). Reported as damage with the offset where the zeros start.
* **corruption**: bad bytes with more data after them (a flipped bit, a damaged length field, garbage spliced
  in): reported with the offset of the first bad record and, when one exists, of the next valid record.
* a **record that does not continue the session** (checked by the reader: out of sequence, another session's,
  a duplicate, older than its predecessor, after the end record): reported with its offset.

Nothing here raises: the caller decides whether damage is an error (``Session.open(strict=True)``) or a warning
with the prefix kept (the default in every tool).
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

MIN_ZERO_RUN = 16     # trailing zeros shorter than this are read as corrupt bytes, not as a zeroed tail
MAX_CANDIDATES = 256  # record markers tried when looking for a valid record after the damage (bounds the cost)


class Damage(NamedTuple):
    """Damage at byte ``offset``: ``unread`` bytes from there on were not read; ``problem`` says what it is."""

    offset: int
    unread: int
    problem: str

    def __str__(self) -> str:
        return f"{self.problem}: {self.unread:,} bytes from byte {self.offset} not read"


def next_valid_record(data: bytes, start: int, header: struct.Struct, marker: bytes, kinds, max_payload: int) -> int:
    """Offset of the first CRC-valid record starting after ``start`` (-1 if none among the first candidates)."""
    view, end, tried = memoryview(data), len(data), 0
    pos = data.find(marker, start + 1)
    while pos >= 0 and tried < MAX_CANDIDATES:
        tried += 1
        if end - pos >= header.size:
            fields = header.unpack_from(data, pos)
            kind, length, crc = fields[1], fields[3], fields[-1]
            stop = pos + header.size + length
            if kind in kinds and length <= max_payload and stop <= end and \
                    zlib.crc32(view[pos + header.size:stop], zlib.crc32(view[pos:pos + header.size - 4])) == crc:
                return pos
        pos = data.find(marker, pos + 1)
    return -1


def zero_run_start(data: bytes, pos: int) -> int:
    """Where the run of zero bytes that ends the file starts (``len(data)`` when the last byte is not zero)."""
    return pos + len(data[pos:].rstrip(b"\0")) if data.endswith(b"\0") else len(data)


def classify(data: bytes, pos: int, problem: str, torn: bool, follows: int) -> Damage | None:
    """The damage from ``pos`` to the end (None: a torn tail). ``torn``: the record at ``pos`` runs past the end
    of the file (or its header does); ``follows``: offset of the next valid record (-1: none)."""
    end = len(data)
    if follows >= 0:
        return Damage(pos, end - pos, f"{problem}, and a valid record follows at byte {follows} (corruption, "
                                      "not a torn tail)")
    if torn:
        return None
    zeros = zero_run_start(data, pos)
    if zeros == pos or end - zeros >= MIN_ZERO_RUN:
        return Damage(pos, end - pos, f"{problem}: the file ends in {end - zeros:,} zero bytes from byte {zeros} "
                                      "(a zeroed tail, or zeros appended)")
    return Damage(pos, end - pos, f"{problem} (corruption in the last record)")
