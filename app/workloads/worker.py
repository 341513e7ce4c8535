"""Worker processes: each backend of a run executes ``run_workload`` in its own spawned process.

Parent side (``WorkerHandle``, no mlx import): ``start()``, ``poll()`` (never blocks), ``cancel()`` (returns
within a second: a stop event first, then terminate/kill), ``close()`` (once finished: the queue and stop event go,
and with them their eight named semaphores, instead of living until the parent exits: a parent ended by a signal
left them to the resource tracker's "leaked semaphore objects" warning), ``alive``, ``exitcode``, ``error``.
Events arrive over a multiprocessing queue as encoded batches (``probes.transport``; typed ``probes.events`` records,
docs/contracts.md section 2); ``poll`` decodes and flattens them. A worker that dies without saying why (a
SIGKILL, a segfault) is reported as a ``WorkerError`` synthesised by the parent (``origin="parent"``), so nothing
ever waits on a dead process: what is known first (the signal; memory at the last sample against the machine's
limit), then, only from those figures, whether out of memory is likely.

Child side (``_worker_main``): stdout/stderr go to a log file (a stray print would corrupt the TUI), the BLAS
thread count is set, OpenBLAS is loaded before mlx, then the workload runs with the probes (``probes.live``).
Exceptions become a ``WorkerError`` event with the traceback text (none for a user's error, such as a limit: its
message says it all), followed by ``Done``. A parent that dies is noticed within a second
(``app.workloads.parent_watch``): the worker records an error event, stops the run and exits, so neither it nor
multiprocessing's resource tracker (which exits once no process holds its pipe) outlives the parent by more than a
few seconds.
"""

from __future__ import annotations

import os
import queue as queue_mod
import signal
import tempfile
import time
import traceback
from pathlib import Path

import msgspec

from app.workloads.spec import RunSpec
from probes.events import Done, Event, RunStage, Sample, WorkerError
from probes.transport import decode_batch

QUEUE_BATCHES = 4096
CANCEL_GRACE_S = 0.5
OOM_LIKELY_FRACTION = 0.8   # RSS at the last sample within this fraction of the memory limit: OOM is the likely cause
OOM_LOW_AVAILABLE = 0.05    # ... or system memory available below this fraction of the total


def default_log_path(spec: RunSpec) -> str:
    directory = Path(tempfile.gettempdir()) / "slabscope-logs"
    directory.mkdir(parents=True, exist_ok=True)
    return str(directory / f"worker-{spec.backend}-{os.getpid()}-{time.time_ns() % 10**9}.log")


class WorkerHandle:
    """One backend run in a spawned process. Owns the process, its queue and stop event, and the error text."""

    def __init__(self, spec: RunSpec, *, log_path: str | None = None):
        self.spec = spec
        self.log_path = log_path or default_log_path(spec)
        self.error: str | None = None
        self.done = False
        self.summary: dict | None = None
        self._process = None
        self._queue = None
        self._stop = None
        self._stop_requested = False  # cancel() asked the worker to stop (kept past close())
        self._reported_exit = False
        self.last_sample: Sample | None = None  # the latest memory sample received (what a death report cites)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> "WorkerHandle":
        import multiprocessing as mp

        if self._process is not None:
            raise RuntimeError("worker already started")
        ctx = mp.get_context("spawn")
        self._queue = ctx.Queue(maxsize=QUEUE_BATCHES)
        self._stop = ctx.Event()
        self._process = ctx.Process(target=_worker_main,
                                    args=(self.spec, self._queue, self._stop, self.log_path, os.getpid()),
                                    name=f"slabscope-{self.spec.backend}", daemon=True)
        self._process.start()
        return self

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    @property
    def exitcode(self) -> int | None:
        return None if self._process is None else self._process.exitcode

    @property
    def finished(self) -> bool:
        """True once ``done`` arrived or the process is gone and its end was reported by ``poll``."""
        return self.done or (self._reported_exit and not self.alive)

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def cancel(self) -> None:
        """Ask the worker to stop; terminate (then kill) it if it has not exited within ~0.5 s. Returns < 1 s."""
        if self._process is None or self._stop is None:
            return
        self._stop_requested = True
        self._stop.set()
        self._process.join(CANCEL_GRACE_S)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(0.25)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(0.2)

    def close(self, timeout: float = 2.0) -> None:
        """Release what the worker was reached through, once it is finished (``cancel`` first otherwise): the
        process is joined (up to ``timeout``, then killed), the queue closed, and the queue and stop event dropped,
        so their named semaphores are unlinked and unregistered now (multiprocessing's finalizers run when the last
        reference goes). Events not polled before are lost. Idempotent."""
        if self._process is not None and self._process.exitcode is None:
            self._process.join(timeout)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(1.0)
        if self._queue is not None:
            self._queue.close()
            self._queue.join_thread()
        self._queue = self._stop = None

    def join(self, timeout: float) -> list[Event]:
        """Poll until the worker finished (``done`` seen or the process gone) or ``timeout``; returns events."""
        deadline = time.monotonic() + timeout
        events: list[Event] = []
        while time.monotonic() < deadline:
            events.extend(self.poll())
            if self.finished:
                break
            time.sleep(0.02)
        events.extend(self.poll())
        return events

    # ---------------------------------------------------------------- events
    def poll(self) -> list[Event]:
        """Every event received so far (never blocks). Adds an ``error`` event if the process died silently."""
        if self._queue is None:
            return []
        events = self._drain()
        if not self.alive and not self._reported_exit:
            events.extend(self._drain())  # what the child flushed just before exiting
            self._reported_exit = True
            if not self.done:
                events.append(self._death_event())
        return events

    def _drain(self) -> list[Event]:
        events: list[Event] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except (queue_mod.Empty, OSError, EOFError, ValueError):
                break
            try:
                batch = decode_batch(item)
            except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError) as exc:
                batch = [WorkerError(t=time.monotonic(), step=-1, tokens=-1, origin="parent",
                                     text=f"undecodable batch from the worker: {exc}")]
            for event in batch:
                self._observe(event)
                events.append(event)
        return events

    def _observe(self, event: Event) -> None:
        if isinstance(event, Sample):
            self.last_sample = event
        elif isinstance(event, WorkerError) and self.error is None:
            self.error = event.text
        elif isinstance(event, Done):
            self.done = True
            self.summary = event.summary

    def _death_event(self) -> WorkerError:
        code = self.exitcode
        if code is not None and code < 0:
            sig = -code
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = "unknown signal"
            text = f"killed by signal {sig} ({name})"
            if sig == signal.SIGKILL and not self._stop_requested:
                text += f" from outside the worker; {describe_memory_at_death(self.last_sample)}"
            elif self._stop_requested:
                text += " after cancel"
        else:
            text = f"worker exited with code {code} without reporting a result"
        tail = _log_tail(self.log_path)
        if self.error is None:
            self.error = text
        return WorkerError(t=time.monotonic(), step=-1, tokens=-1, text=text, traceback=tail, origin="parent")


def describe_memory_at_death(sample: Sample | None, now: float | None = None) -> str:
    """What is known about memory when a worker was SIGKILLed (its last sample against the machine's limit), then
    the guess those figures support: the kernel's out-of-memory killer sends SIGKILL, but so does anyone else."""
    from pool.device_limits import host_memory
    from pool.limits import format_bytes

    if not sample:
        return "no memory sample arrived before it died, so whether it ran out of memory is unknown"
    host = host_memory()
    rss, available = sample.rss, sample.sys_available
    age = max(0.0, (time.monotonic() if now is None else now) - sample.t)
    known = (f"last memory sample {age:.1f} s before: RSS {format_bytes(rss)} = {rss / host.limit_bytes:.0%} of "
             f"the {host.source}, {format_bytes(available)} of system memory available")
    if rss >= OOM_LIKELY_FRACTION * host.limit_bytes or available < OOM_LOW_AVAILABLE * host.total_bytes:
        return known + "; likely out of memory (the kernel's OOM killer sends SIGKILL)"
    return known + "; memory was far from the limit then, so a kill by another process is more likely than OOM"


def _log_tail(path: str, max_chars: int = 2000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - max_chars))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


# -------------------------------------------------------------------- child side
def _redirect_output(log_path: str) -> None:
    try:
        from probes.live import redirect_output
    except ImportError:  # probes not installed: same effect, done here
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return
    redirect_output(log_path)


def _worker_main(spec: RunSpec, out_queue, stop_event, log_path: str, parent_pid: int | None = None) -> None:
    """Entry point of the spawned process (see the module docstring)."""
    _redirect_output(log_path)
    if spec.blas_threads:
        os.environ["OPENBLAS_NUM_THREADS"] = str(spec.blas_threads)
    from app.models.blas import enable_openblas

    enable_openblas()  # before anything imports mlx
    from app.workloads.worker_sink import make_sink

    sink = make_sink(out_queue, spec)
    sink.emit(RunStage(stage="loading model", detail="importing MLX"))  # the next imports take seconds
    if parent_pid is not None:
        _watch_parent(parent_pid, out_queue, stop_event, sink)
    try:
        from app.workloads.runner import run_workload

        run_workload(spec, sink.emit, sink.tick, stop_event, attach=sink.attach, before_close=sink.finish)
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent as text
        text = f"{type(exc).__name__}: {exc}"
        trace = "" if isinstance(exc, _user_errors()) else traceback.format_exc()
        sink.emit(WorkerError(text=text, traceback=trace))
        sink.finish({"error": text})


def _user_errors() -> tuple[type, ...]:
    """Errors whose message is the whole story (a bad scenario, a limit, a model that cannot load)."""
    from pool.errors import BudgetExceeded, SizeLimitError

    from app.workloads.limits import ScenarioError
    from probes.outfile import OutputError

    return ScenarioError, SizeLimitError, BudgetExceeded, OutputError


def _watch_parent(parent_pid: int, out_queue, stop_event, sink) -> None:
    """Start the parent watch: an orphaned worker records why it stops, then stops (see parent_watch.py)."""
    from app.workloads.parent_watch import ParentWatch

    def on_orphaned(text: str) -> None:
        out_queue.cancel_join_thread()  # nobody reads any more: exiting must not wait to flush the queue
        try:  # recorded before the stop, so the run's last flush carries it
            sink.emit(WorkerError(text=text))
        finally:
            stop_event.set()

    ParentWatch(parent_pid, on_orphaned).start()
