"""What the TUI shows: the sessions on screen and the view state of one refresh.

Every session is the probes' read model (``probes.store.SessionModel``): a live run's model is fed by the ingest
thread with the worker's typed events, a recording is a ``probes.replay.Session`` (the same model, filled from the
file). Views only read models (through ``ViewState``), never workers or files, so a view draws a live run and a
recording with the same code, and every figure (peak, phase at an instant, the pool at an instant) comes from the
one model.

Rank runs (``slabscope record --ranks``): every rank is a session of its own (labelled "slab r0", "slab r1", ...)
and the set also holds the runs (``probes.ranks.RankRun``) with each rank's clock. The app's cursor is an instant
on rank 0's clock (*shared* time); ``ViewState.cursor_in(model)`` is that instant in a session's own seconds, so
every view asks each rank about the same aligned instant, and ``SessionSet.to_shared`` puts a session's times on
the shared axis. A single-process session's own time is the shared time.

Thread model: one writer per live model (the ingest thread, or the rank follower for growing rank recordings); the
UI thread reads. ``SessionSet`` owns the mapping from display names to models (replaced whole when a session is
added while views may iterate it) and a generation counter that orphans writers of a replaced set.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

from pool import PoolSnapshot
from probes.errors import RecordingError
from probes.events import Event
from probes.rank_clock import RankClock
from probes.ranks import RankRun
from probes.store import SessionModel


ROUND_TRIP_S = 1e-9  # rank time -> rank 0's clock -> rank time is exact to ~1e-15 s; see SessionSet.from_shared


class SessionSet:
    """The sessions on screen (one per backend of a live run, or per opened recording), in display order."""

    def __init__(self) -> None:
        self.sessions: dict[str, SessionModel] = {}
        self.generation = 0  # bumped whenever the set is replaced
        self.problems: dict[str, str] = {}  # one-line errors met while reading a session (shown once by the app)
        self.runs: list[RankRun] = []  # rank runs on screen (their ranks are sessions too)
        self._clocks: dict[int, RankClock] = {}  # id(session) -> its rank clock (rank 0's: the identity)
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Drop every session (a new run or newly opened recordings). Writers of the old generation are refused
        from now on (a stopping run's last events never leak into what replaces it)."""
        with self._lock:
            self.sessions = {}
            self.problems = {}
            self.runs, self._clocks = [], {}
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
        self.sessions = {**self.sessions, label: model}  # a new dict: a view iterating the old one is unaffected
        return label

    def swap(self, old: SessionModel, new: SessionModel) -> bool:
        """Show ``new`` in ``old``'s place, under its label (a followed server's next recording segment); False
        when ``old`` is not on screen."""
        for label, model in self.sessions.items():
            if model is old:
                new.label = label
                self.sessions = {k: (new if k == label else v) for k, v in self.sessions.items()}
                return True
        return False

    def add_run(self, run: RankRun, generation: int | None = None) -> bool:
        """Show every rank of ``run`` (labelled "slab r0", ...) with its clock; refused (False) when
        ``generation`` is given and the set has been reset since."""
        with self._lock:
            if generation is not None and generation != self.generation:
                return False
        if any(m.label.startswith(f"{run.label} r") for m in self.sessions.values()):  # a second run of a backend
            run = dataclasses.replace(run, label=f"{run.label}@{run.run_id[:6]}")
        for rank, model in enumerate(run.sessions):
            model.label = run.rank_label(rank)
            self.add(model)
        self.update_run(run)
        return True

    def update_run(self, run: RankRun) -> None:
        """Replace a run on screen by ``run`` (the same sessions, regrouped: clocks refined by later syncs)."""
        members = {id(model) for model in run.sessions}
        replaced = [r for r in self.runs if members & {id(m) for m in r.sessions}]
        if replaced:  # keep the label it is shown under
            run = dataclasses.replace(run, label=replaced[0].label)
        runs = [r for r in self.runs if r not in replaced] + [run]
        order = {id(m): i for i, m in enumerate(self.sessions.values())}
        self.runs = sorted(runs, key=lambda r: order.get(id(r.sessions[0]), len(order)))
        self._clocks = {**self._clocks, **{id(m): c for m, c in zip(run.sessions, run.clocks)}}

    def run_of(self, model: SessionModel) -> tuple[RankRun, int] | None:
        """(run, rank) of a rank session on screen, None for a single-process session."""
        for run in self.runs:
            for rank, member in enumerate(run.sessions):
                if member is model:
                    return run, rank
        return None

    def to_shared(self, model: SessionModel, t: float) -> float:
        """A time of ``model`` (its own seconds) on the shared axis (rank 0's clock for a rank session)."""
        clock = self._clocks.get(id(model))
        return t if clock is None else clock.to_reference(t)

    def shared_times(self, model: SessionModel, ts: list[float]) -> list[float]:
        """``to_shared`` of a whole column of ``model``'s times (itself for a single-process session)."""
        clock = self._clocks.get(id(model))
        return ts if clock is None else clock.to_reference_many(ts)

    def baseline_of(self, model: SessionModel) -> SessionModel | None:
        """The dense session ``model``'s footprint is compared with: for rank k of a run, rank k of a dense run of
        as many ranks; otherwise the first single-process dense session (else the first dense one)."""
        place = self.run_of(model)
        dense = [m for m in self.sessions.values() if m.label.startswith("dense")]
        if place is None:
            return next((m for m in dense if self.run_of(m) is None), dense[0] if dense else None)
        run, rank = place
        for other in self.runs:
            if other.backend == "dense" and other.world_size == run.world_size:
                return other.sessions[rank]
        return None

    def from_shared(self, model: SessionModel, t: float) -> float:
        """The shared instant ``t`` in ``model``'s own seconds. A shared instant that came from one of the rank's
        own times (a snapshot stepped to, its peak) must land on that time, not a rounding error before it (which
        would show the snapshot before): ``ROUND_TRIP_S`` later, far inside the clock's bound (~0.1 ms)."""
        clock = self._clocks.get(id(model))
        return t if clock is None else clock.from_reference(t) + ROUND_TRIP_S

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
        """Where the last session ends on the shared axis (s)."""
        return max((self.to_shared(m, m.duration) for m in self.sessions.values()), default=0.0)


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

    def cursor_in(self, model: SessionModel) -> float | None:
        """The cursor in ``model``'s own seconds (None: following live data): every rank at the same instant."""
        return None if self.cursor is None else self.sessions.from_shared(model, self.cursor)

    def snapshot(self) -> tuple[float, PoolSnapshot] | None:
        """The chosen pool session's full snapshot at the cursor, with its time on the shared axis (following live:
        the latest one).
        A session whose op log does not replay is reported once (``SessionSet.problems``) and shows nothing."""
        if not self._snapshot:
            self._snapshot = (self._find_snapshot(),)
        return self._snapshot[0]

    def _find_snapshot(self) -> tuple[float, PoolSnapshot] | None:
        model = self.pool_session()
        if model is None:
            return None
        if self.cursor is None:  # following live data: the latest snapshot
            if not model.snapshots:
                return None
            shared, t = self.sessions.to_shared(model, model.snapshots[-1].t), None
        else:
            shared, t = self.cursor, self.cursor_in(model)
        try:
            snap = model.snapshot_at(t)
        except RecordingError as exc:
            self.sessions.problems.setdefault(model.label, str(exc))
            return None
        return (shared, snap) if snap is not None else None
