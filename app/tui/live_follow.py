"""Recordings followed while their writer runs: ``slabscope --open DIR`` on a running ``slabscope serve --record DIR``
(or on a single growing file), mlx-free.

``RecordingFollower`` owns one follower thread, the only writer of the sessions it opens. Every ``POLL_S`` it looks
for session files in the paths it follows, opens those whose metadata record is written (``probes.follow.
GrowingSession``), and reads what every shown session appended (``refresh``). A server's recording comes in
segments (``app.serve.segments``): the sessions of one writer (same ``serve.server_id``, else same file) are one
stream, and the screen shows its newest segment, swapped in under the same label when the next one begins. A
session whose writer process (``pid`` on this host) is gone without an END record is marked failed at once.

``live_paths`` says whether paths hold a recording that is being written now (no END record, writer alive here),
which is how the app decides between following and replaying.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from app.tui.data import SessionSet
from probes.errors import RecordingError
from probes.follow import GrowingSession

POLL_S = 0.5


def session_files(paths: list[Path]) -> list[Path]:
    """The session files of ``paths`` (a directory stands for its ``*.slabrec``), by name."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            out += sorted(p for p in path.glob("*.slabrec") if p.is_file())
        elif path.is_file():
            out.append(path)
    return out


def writer_alive(meta: dict) -> bool:
    """True when the recording's writer (``pid`` in its metadata, on this host) is a running process."""
    pid = meta.get("pid")
    if meta.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_paths(paths: list[Path]) -> bool:
    """True when one of ``paths`` holds a recording without an END record whose writer is running here."""
    for path in session_files(paths):
        try:
            session = GrowingSession.open(path)
        except (RecordingError, OSError):
            continue
        if session.growing and writer_alive(session.meta):
            return True
    return False


def stream_key(session: GrowingSession) -> str:
    serve = session.meta.get("serve")
    if isinstance(serve, dict) and serve.get("server_id"):
        return f"serve:{serve['server_id']}"
    return f"file:{session.path}"


def segment_of(session: GrowingSession) -> int:
    serve = session.meta.get("serve")
    segment = serve.get("segment") if isinstance(serve, dict) else None
    return segment if isinstance(segment, int) else 0


class RecordingFollower:
    """Follows ``paths`` into ``store`` (see the module docstring). Started and stopped from the UI thread."""

    def __init__(self, store: SessionSet, paths: list[Path]) -> None:
        self.store = store
        self.paths = [Path(p) for p in paths]
        self.generation = store.generation
        self.shown: dict[str, GrowingSession] = {}   # stream key -> the session on screen
        self.known: set[Path] = set()                 # files opened (or decided about) already
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="slabscope-follower", daemon=True)

    def start(self) -> "RecordingFollower":
        self.poll()  # what is there now is on screen before the first refresh
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def growing(self) -> bool:
        return any(s.growing and s.error is None for s in self.shown.values())

    def stop(self, wait: float = 0.0) -> None:
        self._stop.set()
        if wait > 0 and self._thread.is_alive():
            self._thread.join(wait)

    def _follow(self) -> None:
        while not self._stop.wait(POLL_S):
            if self.store.generation != self.generation:
                return
            self.poll()

    def poll(self) -> None:
        """One round: open new files, swap in newer segments, read what every shown session appended, mark dead
        writers."""
        for path in session_files(self.paths):
            if path not in self.known:
                self._open(path)
        for key, session in list(self.shown.items()):
            try:
                session.refresh()
            except RecordingError as exc:
                self.store.problems.setdefault(session.label or str(session.path), str(exc))
                session.fail(f"recording unreadable: {exc.problem}")
                continue
            if session.growing and session.error is None and not writer_alive(session.meta):
                session.refresh()  # its last half second, if the writer got it out
                if session.growing:
                    session.fail(f"process {session.meta.get('pid')} ended without closing its recording (killed?)")

    def _open(self, path: Path) -> None:
        try:
            session = GrowingSession.open(path)
        except RecordingError:
            return  # no metadata record yet (a writer that just created it): tried again next round
        self.known.add(path)
        key = stream_key(session)
        current = self.shown.get(key)
        if current is not None and segment_of(current) >= segment_of(session):
            return  # an older segment of a stream already on screen
        session.label = current.label if current is not None else str(session.meta.get("backend", path.stem))
        if current is None:
            if self.store.generation == self.generation:
                self.store.add(session)
        elif not self.store.swap(current, session):
            return
        self.shown[key] = session
