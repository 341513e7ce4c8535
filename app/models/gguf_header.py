"""Read one metadata value from a GGUF file's header in plain Python (no mlx, no weights read).

The CLI and the TUI check a scenario against the model's positions before a worker starts; the TUI process must
not import mlx, and ``mx.load`` would read the whole file. GGUF (v2/v3) starts with its key-value metadata:
``magic, version, tensor_count, kv_count`` then ``kv_count`` entries of ``key string, value type, value``.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
MAX_STRING = 1 << 24  # a longer "string" means the file is not what its header claims


def _read(fh: BinaryIO, fmt: str):
    size = struct.calcsize(fmt)
    data = fh.read(size)
    if len(data) != size:
        raise ValueError("GGUF header ends early")
    return struct.unpack(fmt, data)[0]


def _string(fh: BinaryIO) -> str:
    length = _read(fh, "<Q")
    if length > MAX_STRING:
        raise ValueError(f"GGUF header string of {length} bytes")
    return fh.read(length).decode("utf-8", errors="replace")


def _value(fh: BinaryIO, kind: int):
    if kind in _SCALARS:
        return _read(fh, _SCALARS[kind])
    if kind == _STRING:
        return _string(fh)
    if kind == _ARRAY:
        item_kind, count = _read(fh, "<I"), _read(fh, "<Q")
        if item_kind in _SCALARS:  # skip without decoding
            fh.seek(count * struct.calcsize(_SCALARS[item_kind]), 1)
            return None
        for _ in range(count):
            _value(fh, item_kind)
        return None
    raise ValueError(f"GGUF value type {kind} unknown")


def read_gguf_value(path: str | Path, key: str):
    """The metadata value stored under ``key`` (arrays are not returned), or None when absent. ValueError for a
    file that is not GGUF v2/v3."""
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version = _read(fh, "<I")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} is not supported")
        _read(fh, "<Q")  # tensor count
        for _ in range(_read(fh, "<Q")):
            name = _string(fh)
            value = _value(fh, _read(fh, "<I"))
            if name == key:
                return value
    return None
