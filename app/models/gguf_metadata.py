"""A GGUF file's scalar metadata, read by the ``gguf`` package's ``GGUFReader`` (mlx-free: numpy only).

The CLI and the TUI check a scenario against the model's positions, and a rank launch against its heads, before
any worker starts; the TUI process must not import mlx, and ``mx.load`` would read the whole file. ``GGUFReader``
memory-maps the file and parses every key/value, the tokenizer's arrays included: 5.3 s for the embedded SmolLM2
GGUF on this 2-core machine (49,152 tokens and as many merges, one numpy view each), for a handful of numbers. So
the scalars and strings it reads are kept per file (path, size, mtime): in the process, and on disk in
``$XDG_CACHE_HOME/slabscope/gguf-metadata`` (else ``~/.cache/...``), written whole or not at all (temporary file
and rename); an unreadable cache entry is read again from the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache

CACHE_VERSION = 1


def _cache_path(path: str, stat: os.stat_result) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = hashlib.sha256(f"{CACHE_VERSION}|{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:24]
    return os.path.join(base, "slabscope", "gguf-metadata", f"{key}.json")


def read_with_gguf(path: str) -> dict:
    """The scalar and string key/values of ``path`` as ``GGUFReader`` reads them (arrays are left out). ValueError
    (one line) for a file that is not GGUF or that the reader refuses."""
    from gguf import GGUFReader, GGUFValueType

    try:
        reader = GGUFReader(path)
    except (ValueError, OSError, IndexError, KeyError) as exc:
        raise ValueError(f"{path} is not a GGUF file the gguf package reads ({exc})") from None
    return {name: field.contents() for name, field in reader.fields.items()
            if not name.startswith("GGUF.") and field.types and field.types[0] != GGUFValueType.ARRAY}


def _load_cached(cache: str) -> dict | None:
    try:
        with open(cache, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _store(cache: str, meta: dict) -> None:
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=os.path.dirname(cache), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(meta, fh)
        os.replace(temp, cache)
    except OSError:
        pass  # a read-only home: the next process reads the file again


@lru_cache(maxsize=8)
def _metadata(path: str, size: int, mtime_ns: int) -> dict:
    stat = os.stat(path)
    cache = _cache_path(path, stat)
    meta = _load_cached(cache)
    if meta is None:
        meta = read_with_gguf(path)
        _store(cache, meta)
    return meta


def gguf_metadata(path: str | os.PathLike) -> dict:
    """The scalar and string metadata of a GGUF file (module docstring); ValueError for a file that is not GGUF,
    OSError for one that cannot be read."""
    path = os.path.realpath(os.fspath(path))
    stat = os.stat(path)
    return dict(_metadata(path, stat.st_size, stat.st_mtime_ns))
