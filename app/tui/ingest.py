"""The one ingest thread and the run controller.

Data path of a live run: worker process -> its queue -> ``IngestThread`` (the only reader: polls every handle, never
blocks on one; ``WorkerHandle.poll`` decodes the typed events) -> the ``SessionSet``'s models (and the live
recorder when recording). The UI thread never touches a worker queue; it reads the models on its refresh timer.
Worker start/cancel also stay off the UI thread (``cancel`` may take up to a second).
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any, Callable

from app.tui.data import SessionSet
from app.tui.rank_live import STOP_WAIT_S, RankRecordRun, RankRunChoice
from app.tui.sources import LiveRecorder

POLL_INTERVAL_S = 0.05


class IngestThread(threading.Thread):
    """Drains worker handles into the session set. Owns the handles and the live recorder; mutates only the set's
    live models (through ``SessionSet.ingest``/``SessionModel.fail``) and its own state."""

    def __init__(self, store: SessionSet, handles: dict[str, Any]) -> None:
        super().__init__(name="slabscope-ingest", daemon=True)
        self.store = store
        self.generation = store.generation  # the set this run feeds; a reset orphans the thread
        self.handles = dict(handles)
        self.requests: queue.Queue = queue.Queue()
        self.recorder: LiveRecorder | None = None
        self.recorded_paths: list[Path] = []
        self.record_error: str | None = None
        self._halt = threading.Event()
        self.events_ingested = 0

    def run(self) -> None:
        for name, handle in list(self.handles.items()):
            try:
                handle.start()
            except Exception as exc:  # noqa: BLE001 - a worker that cannot start is shown, the others still run
                self.store.session(name).fail(f"could not start worker: {exc}")
                del self.handles[name]
        while not self._halt.is_set():
            self._serve_requests()
            busy = False
            for name, handle in self.handles.items():
                busy |= self._drain(name, handle)
            if not busy:
                self._halt.wait(POLL_INTERVAL_S)
        self._serve_requests()
        self._close_recorder()
        for handle in self.handles.values():  # the workers are done or cancelled: their semaphores go now
            close = getattr(handle, "close", None)
            if close is not None and not getattr(handle, "alive", False):
                close()

    def _drain(self, name: str, handle: Any) -> bool:
        """Move one handle's pending events into its session; mark it failed if the worker died silently."""
        if self.store.generation != self.generation:
            self._halt.set()  # the set moved on (new run or recording): stop feeding it
            return False
        model = self.store.session(name)
        try:
            events = handle.poll()
        except Exception as exc:  # noqa: BLE001 - a broken pipe to a dead worker must not kill the UI's data path
            events = []
            model.fail(f"lost connection to worker: {exc}")
        if events:
            if not self.store.ingest(name, events, self.generation):
                self._halt.set()
                return False
            self.events_ingested += len(events)
            self._record(model, events)
        if not events and not handle.alive and not model.complete and model.error is None:
            error = getattr(handle, "error", None)
            model.fail(error or f"worker exited with code {getattr(handle, 'exitcode', '?')} before finishing")
        return bool(events)

    def _record(self, model, events: list) -> None:
        if self.recorder is None:
            return
        try:
            self.recorder.write(model, events)
        except Exception as exc:  # noqa: BLE001 - disk full etc.: stop recording, keep the live view going
            self.record_error = f"recording stopped: {exc}"
            self._close_recorder()

    def _serve_requests(self) -> None:
        while True:
            try:
                request, arg = self.requests.get_nowait()
            except queue.Empty:
                return
            if request == "record_start" and self.recorder is None:
                self.recorder = LiveRecorder(*arg)
                self.record_error = None
            elif request == "record_stop":
                self._close_recorder()

    def _close_recorder(self) -> None:
        if self.recorder is not None:
            try:
                self.recorded_paths = self.recorder.close()
            finally:
                self.recorder = None

    def halt(self) -> None:
        """Ask the thread to finish (closes any recording)."""
        self._halt.set()


class RunController:
    """Starts, stops and records live runs. Called from the UI thread; never blocks it (worker start/cancel run on
    a helper thread). Owns the workers and the ingest thread of the current run, or the current distributed run
    (``RankRecordRun``: ``record --ranks`` and the follower of its rank recordings)."""

    def __init__(self, store: SessionSet, worker_factory: Callable[..., Any]) -> None:
        self.store = store
        self.worker_factory = worker_factory
        self.ingest: IngestThread | None = None
        self.handles: dict[str, Any] = {}
        self.ranks: RankRecordRun | None = None
        self.follower = None  # RecordingFollower of recordings being written (slabscope --open of a live server)
        self.scenario = ""
        self._lifecycle: list[threading.Thread] = []

    @property
    def running(self) -> bool:
        return any(getattr(h, "alive", False) for h in self.handles.values()) or \
            (self.ranks is not None and self.ranks.alive) or (self.follower is not None and self.follower.growing)

    @property
    def recording(self) -> bool:
        return self.ingest is not None and self.ingest.recorder is not None

    def start(self, backends: list[str], **params: Any) -> None:
        """Stop any current run, reset the session set and start one worker per backend (each in its own process)."""
        self.stop()
        self.store.reset()
        self.scenario = str(params.get("scenario", ""))
        self.ranks = None
        self.handles = {name: self.worker_factory(name, **params) for name in backends}
        for name in backends:
            self.store.session(name)
        self.ingest = IngestThread(self.store, self.handles)
        self.ingest.start()

    def start_ranks(self, choice: RankRunChoice, out: Path) -> RankRecordRun:
        """Stop any current run, reset the session set and start a distributed run writing into ``out``."""
        self.stop()
        self.store.reset()
        self.scenario = choice.scenario
        self.handles, self.ingest = {}, None
        self.ranks = RankRecordRun(self.store, choice, out).start()
        return self.ranks

    def follow(self, paths: list[Path]):
        """Stop any current run, reset the session set and follow the recordings being written in ``paths``
        (``app.tui.live_follow``); returns the follower."""
        from app.tui.live_follow import RecordingFollower

        self.stop()
        self.store.reset()
        self.handles, self.ingest, self.ranks = {}, None, None
        self.follower = RecordingFollower(self.store, paths).start()
        return self.follower

    def stop(self) -> None:
        """Cancel the workers (in the background) and stop ingesting once they are gone; stop a distributed run's
        ranks (in the background too); stop following recordings."""
        if self.follower is not None:
            self.follower.stop()
            self.follower = None
        if self.ranks is not None and self.ranks.alive:
            self._in_background(self.ranks.stop)
        handles, ingest = list(self.handles.values()), self.ingest
        if not handles and ingest is None:
            return

        def shutdown() -> None:
            for h in handles:
                try:
                    h.cancel()
                except Exception:  # noqa: BLE001 - best effort: the process may be gone already
                    pass
            if ingest is not None:
                time.sleep(POLL_INTERVAL_S * 2)  # let the last events (the "done"/error) drain
                ingest.halt()

        self._in_background(shutdown)

    def start_recording(self, directory: Path) -> None:
        if self.ingest is not None:
            self.ingest.requests.put(("record_start", (directory, self.scenario or "run")))

    def stop_recording(self) -> None:
        if self.ingest is not None:
            self.ingest.requests.put(("record_stop", None))

    def recorded_paths(self) -> list[Path]:
        return list(self.ingest.recorded_paths) if self.ingest else []

    def _in_background(self, fn: Callable[[], Any]) -> None:
        thread = threading.Thread(target=fn, name="slabscope-lifecycle", daemon=True)
        self._lifecycle.append(thread)
        thread.start()

    def shutdown(self, timeout: float = 3.0) -> None:
        """Stop everything and wait (bounded) for workers to be cancelled and a distributed run's processes to be
        gone (up to ``STOP_WAIT_S`` more): quitting never hangs and leaves no process behind."""
        ranks = self.ranks is not None and self.ranks.alive
        self.stop()
        deadline = time.monotonic() + timeout + (STOP_WAIT_S + 3.0 if ranks else 0.0)
        for thread in self._lifecycle:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self.ingest is not None:
            self.ingest.halt()
            self.ingest.join(max(0.0, deadline - time.monotonic()))
