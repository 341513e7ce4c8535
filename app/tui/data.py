"""What the TUI shows: the sessions on screen and the view state of one refresh.

Every session is the probes' read model (``probes.store.SessionModel``): a live run's model is fed by the ingest
thread with the worker's typed events, a recording is a ``probes.replay.Session`` (the same model, filled from the
file). Views only read models (through ``ViewState``), never workers or files, so a view draws a live run and a
recording with the same code, and every figure (peak, phase at an instant, the pool at an instant) comes from the
one model.

Thread model: one writer per live model (the ingest thread); the UI thread reads. ``SessionSet`` owns the mapping
from display names to models and a generation counter that orphans writers of a replaced set.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pool import PoolSnapshot
from probes.errors import RecordingError
from probes.events import Event
from probes.store import SessionModel


class SessionSet:
    """The sessions on screen (one per backend of a live run, or per opened recording), in display order."""

    def __init__(self) -> None:
        self.sessions: dict[str, SessionModel] = {}
        self.generation = 0  # bumped whenever the set is replaced
        self.problems: dict[str, str] = {}  # one-line errors met while reading a session (shown once by the app)
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Drop every session (a new run or newly opened recordings). Writers of the old generation are refused
        from now on (a stopping run's last events never leak into what replaces it)."""
        with self._lock:
            self.sessions = {}
            self.problems = {}
            self.generation += 1

    def session(self, name: str) -> SessionModel:
        """The live session called ``name``, created on first use."""
        if name not in self.sessions:
            self.sessions[name] = SessionModel(label=name)
        return self.sessions[name]

    def add(self, model: SessionModel) -> str:
        """Show ``model`` (a recording) under its label, made unique; returns the label used."""
        label = model.label or "session"
        if label in self.sessions:
            label = f"{label}@{model.source.rsplit('/', 1)[-1].removesuffix('.slabrec')[-8:]}"
        model.label = label
        self.sessions[label] = model
        return label

    def ingest(self, name: str, events: list[Event], generation: int | None = None) -> bool:
        """Fold a batch of events from worker ``name`` into its session; refused (False) when ``generation`` is
        given and the set has been reset since."""
        with self._lock:
            if generation is not None and generation != self.generation:
                return False
            model = self.session(name)
            for event in events:
                model.append(event)
        return True

    def pool_sessions(self) -> list[SessionModel]:
        """Sessions with a pool (slab/monolithic), in display order."""
        return [m for m in self.sessions.values() if m.is_pool]

    def duration(self) -> float:
        """Longest session duration (s)."""
        return max((m.duration for m in self.sessions.values()), default=0.0)


def refresh_guarded(view, frame: "ViewState") -> None:
    """``view.refresh_view(frame)``; a ``RecordingError`` met while reading a session (a record decoded lazily,
    a keyframe or op log that does not replay) is recorded once in ``SessionSet.problems`` (the app notifies it)
    instead of ending the app: a hostile recording costs a view its picture, never the dashboard."""
    try:
        view.refresh_view(frame)
    except RecordingError as exc:
        frame.sessions.problems.setdefault(exc.path, str(exc))


@dataclass
class ViewState:
    """What views draw at one refresh: the sessions, the cursor (None = live/latest), and the display choices."""

    sessions: SessionSet
    cursor: float | None
    x_mode: str = "time"  # "time" | "step" | "tokens"
    pool_name: str | None = None  # which pool session the pool views show
    gate: float = 1.15
    _snapshot: tuple = field(default=(), repr=False)  # memo of snapshot() for this refresh

    def pool_session(self) -> SessionModel | None:
        """The pool session the pool views show (the chosen one, else the first)."""
        pools = self.sessions.pool_sessions()
        for model in pools:
            if model.label == self.pool_name:
                return model
        return pools[0] if pools else None

    def snapshot(self) -> tuple[float, PoolSnapshot] | None:
        """The chosen pool session's full snapshot at the cursor, with its time (following live: the latest one).
        A session whose op log does not replay is reported once (``SessionSet.problems``) and shows nothing."""
        if not self._snapshot:
            self._snapshot = (self._find_snapshot(),)
        return self._snapshot[0]

    def _find_snapshot(self) -> tuple[float, PoolSnapshot] | None:
        model = self.pool_session()
        if model is None:
            return None
        t = self.cursor
        if t is None:
            latest = model.snapshots[-1] if model.snapshots else None
            if latest is None:
                return None
            t = latest.t
        try:
            snap = model.snapshot_at(t if self.cursor is not None else None)
        except RecordingError as exc:
            self.sessions.problems.setdefault(model.label, str(exc))
            return None
        return (t, snap) if snap is not None else None
