"""The files of a server's recording (mlx-free): one directory, one backend process, numbered segments.

A server runs for days; a recording file is read whole (``probes.limits.max_file_bytes``, 512 MiB by default), so
``slabscope serve --record DIR`` writes segments: ``serve-<backend>-<stamp>-<pid>-<n>.slabrec``, each a complete
recording that opens on its own, the next begun when the current one passes ``segment_bytes``
(``probes.live.WorkerProbes.rotate_recording``). Only the newest ``keep`` segments are kept: the disk a server's
recording takes is bounded by ``keep * segment_bytes`` (plus one record batch). Only files this server created are
ever removed; a name that exists is never reused (``next_path`` skips it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

DEFAULT_SEGMENT_MIB = 256
DEFAULT_KEEP = 8
MIB = 1024 * 1024


class Segments:
    """Owns the names of one server's recording files and the list of those it created (oldest first)."""

    def __init__(self, directory: str | os.PathLike, backend: str, *, segment_bytes: int = DEFAULT_SEGMENT_MIB * MIB,
                 keep: int = DEFAULT_KEEP, pid: int | None = None) -> None:
        if keep < 2:
            raise ValueError("keep at least 2 segments (the one being closed and the one being written)")
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be >= 1")
        self.directory = Path(directory)
        self.stem = f"serve-{backend}-{time.strftime('%Y%m%d-%H%M%S')}-{pid or os.getpid()}"
        self.segment_bytes = segment_bytes
        self.keep = keep
        self.created: list[Path] = []
        self.number = -1

    @property
    def current(self) -> Path | None:
        return self.created[-1] if self.created else None

    def next_path(self) -> Path:
        """The next segment's name (a fresh one: an existing file is never written over); becomes ``current``."""
        while True:
            self.number += 1
            path = self.directory / f"{self.stem}-{self.number:03d}.slabrec"
            if not path.exists():
                self.created.append(path)
                return path

    def due(self, bytes_written: int, recording_path: str | None) -> bool:
        """True when the file being written is the current segment and has reached ``segment_bytes`` (a rotation
        asked for but not yet done by the probe thread is not asked for again)."""
        current = self.current
        return (current is not None and recording_path is not None and Path(recording_path) == current
                and bytes_written >= self.segment_bytes)

    def prune(self) -> list[Path]:
        """Remove this server's segments older than the newest ``keep``; returns those removed."""
        removed = []
        while len(self.created) > self.keep:
            path = self.created.pop(0)
            try:
                path.unlink()
                removed.append(path)
            except FileNotFoundError:
                pass
        return removed
