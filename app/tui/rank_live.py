"""A live distributed run from the TUI: ``slabscope record --ranks N`` in the background, its rank recordings
followed while they grow.

``RankRecordRun`` owns the ``record`` process (its output kept for the Ranks view) and the follower thread. The
follower is the only writer of the sessions it opens: every ``POLL_S`` it opens the rank files that appeared in the
run's directory (``probes.follow.GrowingSession``), reads what each rank appended, and shows a run once all its ranks
are there (``SessionSet.add_run``; later syncs refine the clocks: ``update_run``). A rank whose process is gone
without closing its recording (killed, crashed) is marked failed at once, from its pid; when ``record`` ends, every
rank still unfinished is. Nothing waits on a rank: the views read whatever the files hold.

Stopping (the stop key, a new run, quitting) sends ``record`` SIGTERM: it stops its launcher's process group and the
ranks record why they stopped. Whatever of the process tree is still alive after ``STOP_WAIT_S`` is killed, so no
process of the run outlives the TUI. ``record --stop-with-parent`` covers a TUI that is itself killed.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from app.tui.data import SessionSet
from app.workloads.launch import live_pids
from app.workloads.spec import PoolChoice
from probes.errors import RecordingError
from probes.follow import GrowingSession
from probes.ranks import RankMergeError, group_runs, rank_info

POLL_S = 0.5
STOP_WAIT_S = 8.0     # record stops its launcher group within ~3 s (ranks close their files on SIGTERM)
OUTPUT_LINES = 200


@dataclass(frozen=True)
class RankRunChoice:
    """What a live distributed run needs: the run form's choices plus the ranks and mlx's distributed backend."""

    scenario: str
    model: str
    backends: list[str]
    ranks: int
    launch_backend: str = "ring"
    pool: PoolChoice = PoolChoice()    # block size, slab blocks, shrink (``record`` flags)
    extra_args: tuple[str, ...] = ()   # more ``record`` flags (tests shorten the scenario with --set)


def record_command(choice: RankRunChoice, out: Path) -> list[str]:
    """The ``slabscope record --ranks`` command line for ``choice``, writing into ``out``."""
    command = [sys.executable, "-m", "app", "record", "--ranks", str(choice.ranks), "--launch-backend",
               choice.launch_backend, "--scenario", choice.scenario, "--model", choice.model, "--backends",
               ",".join(choice.backends), "--out", str(out), "--stop-with-parent"]
    return command + choice.pool.record_flags() + list(choice.extra_args)


class RankRecordRun:
    """One live distributed run (see the module docstring). Started and stopped from the UI thread; never blocks
    it except in ``stop(wait=True)`` (quitting), which is bounded."""

    def __init__(self, store: SessionSet, choice: RankRunChoice, out: Path) -> None:
        self.store = store
        self.choice = choice
        self.out = Path(out)
        self.generation = store.generation
        self.output: collections.deque[str] = collections.deque(maxlen=OUTPUT_LINES)
        self.process: subprocess.Popen | None = None
        self.sessions: dict[Path, GrowingSession] = {}
        self.start_error: str | None = None
        self.passes = 0  # follower passes completed (open, read, show, mark): what a test waits on
        self._pending: dict[Path, str] = {}      # files not readable yet (no metadata record written so far)
        self._shown: set[str] = set()            # run ids on screen
        self._wake = threading.Event()
        self._stop_lock = threading.Lock()
        self._follower = threading.Thread(target=self._follow, name="slabscope-rank-follower", daemon=True)

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> "RankRecordRun":
        """Create the run's directory, start ``record`` and the follower."""
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            env = dict(os.environ, PYTHONUNBUFFERED="1")
            # its own session: a terminal's signals reach it only through the TUI (which stops it cleanly)
            self.process = subprocess.Popen(record_command(self.choice, self.out), stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        except OSError as exc:
            self.start_error = f"could not start slabscope record: {exc}"
            self.output.append(self.start_error)
            return self
        threading.Thread(target=self._read_output, name="slabscope-rank-output", daemon=True).start()
        self._follower.start()
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def done(self) -> bool:
        """``record`` has ended and the follower has read the rank files to their end."""
        return not self.alive and not self._follower.is_alive()

    def stop(self, wait: float = 0.0) -> None:
        """Stop ``record`` and every process under it: SIGTERM (record stops its launcher's group), then SIGKILL to
        whatever is left after ``STOP_WAIT_S``. ``wait`` > 0 also waits (bounded) for the follower's last read."""
        with self._stop_lock:  # one stop at a time; a second caller finds the processes gone
            self._stop_processes()
        self._wake.set()  # the follower's last read: the ranks' files now end with why they stopped
        if wait > 0 and self._follower.is_alive():
            self._follower.join(wait)

    def _stop_processes(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            tree = _process_tree(process.pid)  # before the launcher exits: its ranks would be reparented
            try:
                process.send_signal(signal.SIGTERM)
                process.wait(STOP_WAIT_S)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
            _kill_all(tree + _process_tree(process.pid))
            try:
                process.wait(2.0)
            except subprocess.TimeoutExpired:
                pass

    # ---- output ------------------------------------------------------------------------------------------------
    def _read_output(self) -> None:
        for raw in self.process.stdout:
            self.output.append(raw.decode(errors="replace").rstrip())

    def rank_said(self, backend: str, rank: int) -> str | None:
        """What the launcher's output says about a rank's failure (``[slab rank 1] FAILED: ...``), if anything."""
        prefix = f"[{backend} rank {rank}] FAILED: "
        return next((line[len(prefix):] for line in reversed(self.output) if line.startswith(prefix)), None)

    # ---- following the recordings -------------------------------------------------------------------------------
    def _follow(self) -> None:
        while self.store.generation == self.generation:
            finished = not self.alive
            self._open_new(final=finished)
            for path, session in list(self.sessions.items()):
                try:
                    session.refresh()
                except RecordingError as exc:
                    self.store.problems.setdefault(session.label or path.name, str(exc))
                    session.fail(f"recording unreadable: {exc.problem}")
                    del self.sessions[path]
            self._show_runs(final=finished)
            self._mark_dead(finished)
            self.passes += 1
            if finished:
                return
            self._wake.wait(POLL_S)

    def _open_new(self, final: bool) -> None:
        """Open rank files that appeared (a file without its metadata record yet is tried again next time)."""
        for path in sorted(self.out.glob("*.slabrec")):
            if path in self.sessions:
                continue
            try:
                session = GrowingSession.open(path)
            except RecordingError as exc:
                self._pending[path] = str(exc)
                if final:  # record is done: what is unreadable now stays so
                    self.store.problems.setdefault(path.name, str(exc))
                continue
            self._pending.pop(path, None)
            info = rank_info(session)
            session.label = f"{session.meta.get('backend', '?')} r{info['rank']}" if info else path.stem
            self.sessions[path] = session

    def _show_runs(self, final: bool) -> None:
        """Show every run whose ranks are all open; refine the clocks of runs on screen. Once ``record`` ended, a
        run that still misses a rank is a one-line problem and its ranks are shown alone."""
        by_run: dict[str, list] = {}
        for session in self.sessions.values():
            info = rank_info(session)
            if info is not None:
                by_run.setdefault(str(info["run_id"]), []).append(session)
        for run_id, members in by_run.items():
            world = int(rank_info(members[0])["world_size"])
            if len(members) < world and final and run_id not in self._shown \
                    and self.store.generation == self.generation:
                self._shown.add(run_id)
                missing = world - len(members)
                self.store.problems.setdefault(run_id, f"run {run_id}: {missing} of {world} ranks wrote no recording; "
                                                       "showing the others alone")
                for member in members:
                    self.store.add(member)
            if len(members) < world:
                continue  # a rank has not written its file yet
            try:
                runs, _ = group_runs(members)
            except RankMergeError as exc:
                self.store.problems.setdefault(run_id, str(exc))
                continue
            if run_id in self._shown:
                self.store.update_run(runs[0])
            elif self.store.add_run(runs[0], self.generation):
                self._shown.add(run_id)

    def _mark_dead(self, finished: bool) -> None:
        """A rank whose process is gone but whose recording has no end died without closing it: say so (once)."""
        here = socket.gethostname()
        for session in self.sessions.values():
            if session.complete or session.error is not None:
                continue
            info = rank_info(session) or {}
            pid = info.get("pid")
            gone = finished or (info.get("host") == here and isinstance(pid, int) and not _running(pid))
            if not gone:
                continue
            try:
                session.refresh()  # its last half second, if the writer got it out
            except RecordingError:
                pass
            if session.complete:
                continue
            said = self.rank_said(str(session.meta.get("backend", "?")), int(info.get("rank", -1)))
            session.fail(f"rank process {pid} ended without closing its recording"
                         + (f": {said}" if said else " (killed?)"))


def _running(pid: int) -> bool:
    import psutil

    try:
        return bool(live_pids([psutil.Process(pid)]))
    except psutil.Error:
        return False


def _process_tree(pid: int) -> list:
    """``psutil.Process`` handles of ``pid`` and everything under it (a handle never kills a recycled pid)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _kill_all(processes: list) -> None:
    import psutil

    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            pass


def new_run_dir(recordings: Path, scenario: str) -> Path:
    """A fresh directory for a live distributed run's rank recordings: ``<recordings>/ranks-<stamp>-<scenario>``."""
    stem = Path(scenario).stem
    base = Path(recordings) / f"ranks-{time.strftime('%Y%m%d-%H%M%S')}-{stem}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path
