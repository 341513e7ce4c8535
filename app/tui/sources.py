"""Where the TUI's data comes from: worker processes (``app.workloads``) for live runs, session files (``probes``)
for recordings, and the recorder that saves a live run. Both kinds of session end up as the probes' read model. This module is the only place the TUI touches those
packages, so a change in their API is a change here only. Everything imported here is mlx-free; the workers import
mlx in their own processes.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from probes.events import Done, Event, MetaUpdate, RunStage, SnapshotTaken
from probes.store import SessionModel

DEFAULT_RECORDINGS_DIR = Path("recordings")
SHIPPED_RECORDINGS_DIR = Path(__file__).resolve().parents[2] / "assets" / "recordings"
MAX_NAME_TRIES = 100  # numbered names tried for a live recording whose name is taken


# ---- live runs --------------------------------------------------------------------------------------------------
def list_scenarios() -> list[tuple[str, str]]:
    """(name, description) of the bundled scenarios (reads TOML files; no mlx)."""
    from app.workloads.scenarios import list_scenarios as _list

    return _list()


def default_scenario() -> str:
    from app.workloads.scenarios import DEFAULT_SCENARIO

    return DEFAULT_SCENARIO


def known_models() -> list[str]:
    """The model names a live run accepts by name (the embedded model, the synthetic ones); a local mlx-lm
    directory is accepted too (mlx-free)."""
    from app.models.registry import list_models

    return list_models()


def scenario_defaults(name: str) -> dict:
    """The pool parameters a live run of scenario ``name`` uses when block and slab sizes are left empty: the
    scenario's [pool] table, else slabscope's defaults (mlx-free: reads the scenario's TOML file)."""
    from app.workloads.scenarios import load_scenario
    from app.workloads.spec import RunSpec, resolved_pool_params

    return resolved_pool_params(RunSpec(scenario=name), load_scenario(name).pool)


def prepare_worker_spawning() -> None:
    """Start multiprocessing's resource tracker now, while sys.stderr is still the real stream.

    Once Textual runs it replaces sys.stderr with a capture object whose fileno() is not a real descriptor, and
    the tracker's first launch (inside the first ``WorkerHandle.start``) fails with "bad value(s) in
    fds_to_keep". Launching it up front avoids that; spawned workers then reuse it."""
    if os.name != "posix":
        return
    from multiprocessing import resource_tracker

    try:
        resource_tracker.ensure_running()
    except (OSError, ValueError):  # no usable stderr even now: the first worker start will report it
        pass


def check_run_choice(choice) -> str | None:
    """Why a run form's choice cannot start, in one line (None: it can): for ranks > 1, a model whose heads do not
    split that many ways, or a launch backend this machine cannot use (mlx-free: names, headers, PATH)."""
    if choice.ranks <= 1:
        return None
    from app.models.geometry import declared_geometry, shard_problem
    from app.workloads.launch import LaunchPlan

    try:
        LaunchPlan(ranks=choice.ranks, backend=choice.launch_backend)
        return shard_problem(declared_geometry(choice.model), choice.ranks, choice.model)
    except ValueError as exc:  # LaunchError, an unknown or unreadable model
        return str(exc)


def make_worker(backend: str, *, scenario: str, model: str, block_size: int | None, slab_blocks: int | None,
                blas_threads: int | None = 1, **extra):
    """A not-yet-started ``WorkerHandle`` running one backend in its own (spawned) process."""
    from app.workloads.spec import RunSpec
    from app.workloads.worker import WorkerHandle

    spec = RunSpec(scenario=scenario, backend=backend, model=model, block_size=block_size, slab_blocks=slab_blocks,
                   blas_threads=blas_threads, **extra)
    return WorkerHandle(spec)


# ---- recordings ---------------------------------------------------------------------------------------------------
class OpenCancelled(Exception):
    """``open_recordings`` or ``list_recordings`` stopped between two files: its ``cancel`` event was set."""


@dataclass
class RecordingInfo:
    """One session file as listed in the Sessions view."""

    path: Path
    backend: str
    scenario: str
    model: str
    duration: float
    size: int
    complete: bool
    error: str = ""    # unreadable: the one-line reason
    damage: str = ""   # readable up to damage: what and where
    run_id: str = ""  # a rank recording's distributed run ("" for a single-process session)
    rank: str = ""    # "r1/2": rank 1 of 2


def is_recording(path: Path) -> bool:
    """True when the file starts with the session format's magic bytes."""
    from probes.format import MAGIC

    try:
        with open(path, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def describe(path: Path) -> RecordingInfo:
    """Open a session file just enough to list it; unreadable files are listed with their one-line error."""
    from probes.errors import RecordingError
    from probes.ranks import rank_info
    from probes.replay import Session

    size = path.stat().st_size if path.exists() else 0
    try:
        s = Session.open(path)
    except RecordingError as exc:
        return RecordingInfo(path, "?", "?", "?", 0.0, size, False, str(exc.problem))
    meta = s.meta
    info = rank_info(s) or {}
    return RecordingInfo(path, str(_meta_value(meta, "backend")), str(_meta_value(meta, "scenario")),
                         str(_meta_value(meta, "model")), s.duration, size, s.complete,
                         run_id=str(info.get("run_id", "")),
                         rank=f"r{info['rank']}/{info.get('world_size', '?')}" if info else "",
                         damage=str(s.damage) if s.damage is not None else "")


def _meta_value(meta: dict, key: str) -> object:
    """A field of the session meta, looked up at the top level, then inside a nested spec/params dict."""
    if key in meta:
        value = meta[key]
        return value.get("name", value) if isinstance(value, dict) else value
    for nest in ("spec", "params", "run"):
        if isinstance(meta.get(nest), dict) and key in meta[nest]:
            return meta[nest][key]
    return "?"


def recording_files(directory: Path) -> list[Path]:
    """Session files in ``directory`` (recognised by content, not by name; regular files only: a FIFO or a device
    is never opened), newest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    files = [p for p in directory.iterdir() if p.is_file() and is_recording(p)]
    files.sort(key=lambda p: (-p.stat().st_mtime, p.name))
    return files


def list_recordings(directory: Path, *, files: list[Path] | None = None, cancel=None,
                    progress=None) -> list[RecordingInfo]:
    """``describe`` of every session file in ``directory`` (``files``: its ``recording_files`` when known), newest
    first. ``cancel`` is looked at between two files (OpenCancelled); ``progress(k, n)`` is called after each."""
    files = recording_files(directory) if files is None else files
    infos = []
    for index, path in enumerate(files):
        if cancel is not None and cancel.is_set():
            raise OpenCancelled(f"stopped after {index} of {len(files)} recordings")
        infos.append(describe(path))
        if progress is not None:
            progress(index + 1, len(files))
    return infos


def list_folders(directory: Path) -> list[Path]:
    """What the Sessions view lists above the recordings of ``directory``: its parent (shown as ``..``), then its
    subfolders by name (hidden ones left out), all resolved."""
    here = Path(directory).resolve()
    try:
        subfolders = sorted((p.resolve() for p in here.iterdir() if p.is_dir() and not p.name.startswith(".")),
                            key=lambda p: p.name)
    except OSError:  # gone, not a folder, or not readable: nothing to go into
        subfolders = []
    return ([here.parent] if here.parent != here else []) + subfolders


def load_recording(path: Path, name: str | None = None) -> SessionModel:
    """A session file opened into the read model (``probes.replay.Session``), labelled by its backend (a rank
    recording: "slab r1"). Raises probes.RecordingError (one line) for unreadable files."""
    from probes.ranks import rank_info
    from probes.replay import Session

    session = Session.open(path)
    info = rank_info(session)
    backend = str(_meta_value(session.meta, "backend"))
    session.label = name or (f"{backend} r{info['rank']}" if info else backend)
    return session


def expand_paths(paths: list[Path]) -> list[Path]:
    """Files as given; a directory stands for the session files in it (recognised by content), by name."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            out += sorted(p for p in path.iterdir() if p.is_file() and is_recording(p))
        else:
            out.append(path)
    return out


@dataclass
class Opened:
    """Recordings opened for the screen: rank runs (every rank present, clocks aligned), sessions shown on their
    own, and one-line problems (unreadable files, a run with a rank missing)."""

    runs: list = field(default_factory=list)
    plain: list = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def open_recordings(paths: list[Path], as_run: bool = False, *, files: list[Path] | None = None, cancel=None,
                    progress=None) -> Opened:
    """Open ``paths`` (files or directories; ``files``: their ``expand_paths`` when already known) and merge the
    rank recordings of each distributed run into one run. One file named on its own is shown as itself, even one
    rank of a run (unless ``as_run``: the caller asked for its run); a run with a rank missing (or twice) is a
    one-line problem and its ranks are shown alone, unaligned. ``cancel`` (a threading.Event) is looked at
    between two files (OpenCancelled); ``progress(k, n)`` is called after each."""
    from probes.errors import RecordingError
    from probes.ranks import RankMergeError, group_runs, rank_info

    opened = Opened()
    sessions = []
    files = expand_paths(paths) if files is None else files
    for index, path in enumerate(files):
        if cancel is not None and cancel.is_set():
            raise OpenCancelled(f"stopped after {index} of {len(files)} recordings")
        try:
            sessions.append(load_recording(path))
        except (RecordingError, OSError) as exc:
            opened.problems.append(f"cannot open {path}: {exc}")
        if progress is not None:
            progress(index + 1, len(files))
    if len(sessions) == 1 and not as_run and not any(Path(p).is_dir() for p in paths):
        opened.plain = sessions
        return opened
    by_run: dict[str, list] = {}
    for session in sessions:
        info = rank_info(session)
        if info is None:
            opened.plain.append(session)
        else:
            by_run.setdefault(str(info["run_id"]), []).append(session)
    for members in by_run.values():
        try:
            opened.runs += group_runs(members)[0]
        except RankMergeError as exc:
            opened.problems.append(f"{exc}; showing its other ranks alone")
            opened.plain += members
    return opened


class LiveRecorder:
    """Saves the live run: one session file per backend, fed with the same typed events the ingest thread receives.
    Owned and called by the ingest thread only (start/stop requests arrive through ``RunController``).

    A run's file opens once the run's clock is known: the worker's ``t_start``, in the metadata its probes send
    when they start. Its times are then the worker's own (as in the worker's own recording), and its metadata says
    what ran. A worker says where it is ("loading model") before that; those ``RunStage`` events are held until
    the clock is known and written at its start, where the live view shows them (``SessionModel.append``): a time
    before the start is not a time a session file may hold (``probes.limits.time_problem``), and one such record
    made the whole recording unreadable."""

    def __init__(self, directory: Path, scenario: str) -> None:
        self.directory = Path(directory)
        self.scenario = scenario
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.recorders: dict[str, object] = {}
        self.paths: list[Path] = []
        self.exact_since: set[str] = set()  # runs whose file holds a worker keyframe with bookkeeping state
        self.held: dict[str, tuple[SessionModel, list[Event]]] = {}  # runs whose clock is not known yet: events

    def write(self, model: SessionModel, events: list[Event]) -> None:
        """Append a batch for ``model``'s run (``model`` has folded the batch in already: the ingest thread's
        order). Until the run's metadata has come the batch is held; the batch that brings it (or a ``Done``
        without it: a worker that failed while loading) opens the file with everything held."""
        rec = self.recorders.get(model.label)
        if rec is None:
            held = self.held.setdefault(model.label, (model, []))[1]
            held += events
            if not model.meta and not any(isinstance(e, Done) for e in events):
                return
            del self.held[model.label]
            rec, events = self._open(model, held), held
        self._append(rec, model.label, events)
        done = [e for e in events if isinstance(e, Done)]
        if done:
            rec.close(done[-1].summary, t=done[-1].t)

    def _open(self, model: SessionModel, events: list[Event]):
        """The recorder of ``model``'s run, in a new file, on the run's clock as ``SessionModel`` takes it: the
        metadata's ``t_start``, else the first stamp that is not a stage's."""
        self.directory.mkdir(parents=True, exist_ok=True)
        meta = dict(model.meta)
        meta.setdefault("backend", model.label)
        if "t_start" not in meta:
            stamps = [e.t for e in events if not isinstance(e, RunStage)] or [e.t for e in events]
            meta["t_start"] = stamps[0] if stamps else time.monotonic()
        path, rec = self._new_file(f"{self.stamp}-{self.scenario}-{model.label}", meta)
        self.recorders[model.label] = rec
        self.paths.append(path)
        return rec

    def _append(self, rec, label: str, events: list[Event]) -> None:
        """Write a batch (not its metadata or ``Done``: the file's META and END records say those); a stage said
        before the run's clock started sits at its start (the live view's place for it)."""
        rec.write([self._keyframed(label, msgspec.structs.replace(e, t=rec.t_start)
                                   if isinstance(e, RunStage) and e.t < rec.t_start else e)
                   for e in events if not isinstance(e, (MetaUpdate, Done))])

    def _new_file(self, stem: str, meta: dict):
        """(path, recorder) of a new file ``stem.slabrec`` in the directory, or ``stem-2.slabrec``, ``-3``... when
        that name is taken (another TUI recording the same scenario in the same second): never an existing file."""
        from probes.outfile import OutputError
        from probes.recording import SessionRecorder

        for number in range(1, MAX_NAME_TRIES + 1):
            path = self.directory / (f"{stem}.slabrec" if number == 1 else f"{stem}-{number}.slabrec")
            if os.path.lexists(path):
                continue
            try:
                return path, SessionRecorder(path, meta, float(meta.get("t_start", 0.0)))
            except OutputError:
                if not os.path.lexists(path):
                    raise  # not a name taken meanwhile: the directory cannot be written
        raise OutputError(self.directory / f"{stem}.slabrec", f"this name and {MAX_NAME_TRIES - 1} numbered ones "
                                                              "are taken")

    def _keyframed(self, name: str, event: Event) -> Event:
        """A recording started mid-run has no keyframe until the worker flags its next one (with the bookkeeping
        state that makes every instant rebuildable from the op log). Until then each snapshot is stored as a
        keyframe of its own (exact at its instant; between snapshots the nearest earlier one is shown)."""
        if not isinstance(event, SnapshotTaken) or name in self.exact_since:
            return event
        if event.keyframe and event.book_state is not None:
            self.exact_since.add(name)
            return event
        return msgspec.structs.replace(event, keyframe=True)

    def close(self) -> list[Path]:
        """Write what is held for runs whose clock never came (stopped while loading), close every open file (END
        record written); returns the paths written."""
        for model, events in list(self.held.values()):
            del self.held[model.label]
            if events:
                self._append(self._open(model, events), model.label, events)
        for rec in self.recorders.values():
            if not rec.closed:
                rec.close({"stopped_by": "tui"}, t=time.monotonic())
        return self.paths


def recordings_dir() -> Path:
    """Where the TUI saves and lists recordings: $SLABSCOPE_RECORDINGS, else ./recordings."""
    return Path(os.environ.get("SLABSCOPE_RECORDINGS", DEFAULT_RECORDINGS_DIR))
