"""``WorkerProbes``: the probes inside a workload worker (docs/contracts.md section 2b).

Threads: the *workload thread* calls ``emit``, ``tick`` and ``stop`` and runs the pool's op listener; one *probe
thread* every ``flush_s`` (75 ms) moves the pending events, in emission order, to the recording file
(probes.recording) and to the parent (probes.transport). The workload thread only appends to a list under a short
lock: it never waits for the disk or the reader.

Memory samples come at most ``sample_hz`` times a second, each period's from whichever thread gets there: the
workload thread takes one in ``tick`` when one is due (a step boundary: 26-51 us a sample in the H200 records, no
thread switch), and the probe thread, at its flush wake-ups, takes one when the workload has not for
``STALL_PERIODS`` periods (a long step, a wait, the end of the run), then one every period while the stall lasts: a
stall's first sample can come up to ``flush_s`` late. A probe thread waking ``sample_hz`` times a second paid a
timed wait, a GIL hand-over and a scheduler round trip per sample, ~70 us a wake-up on a VM beside a busy Python
thread (lab/probe_cost/wake_floor.py): at 100 Hz that alone was 0.5-0.9% of wall, more than the samples. Pool
snapshots are taken only in the workload thread (in ``tick``), so they never race pool mutations.

Cost is measured, not assumed: the probe thread's own CPU time (``time.thread_time``), the time the workload
thread spends inside the probes (listener, emit, tick/snapshots), and per-sample cost. Not included: the
multiprocessing queue's feeder thread, which pickles batches to the parent (``slabscope bench probes`` measures
the total effect on throughput, feeder included). ``overhead()`` returns
them; a ``probe_stats`` event carries them every ``stats_every_s`` and the END summary keeps the final figure.

A long-running process (``slabscope serve``) bounds its recording per file with ``rotate_recording``: the file ends
(END names the next one) and the recording continues, in order, in a new file that opens on its own (its own META
and, for a pool, a keyframe first).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import msgspec

from probes.events import (Done, Dropped, Event, MetaUpdate, OpBatch, ProbeOverhead, ProbeStats, SnapshotTaken,
                           WorkerError)
from probes.errors import RecordingError
from probes.meta import collect_meta
from probes.recording import SessionRecorder, new_session_id
from probes.transport import BatchSender

FLUSH_S = 0.075       # transport batches to the parent
STALL_PERIODS = 2     # the probe thread samples once the workload thread has not for this many sample periods
FILE_FLUSH_S = 0.5    # recording writes: fewer, larger records keep long sessions fast to open; a SIGKILL loses
                      # at most the last half second (everything written before it stays readable)


class WorkerProbes:
    """Sampling, events, snapshots, recording and transport for one backend run (see module docstring)."""

    def __init__(self, out_queue: Any = None, sample_hz: float = 10.0, snapshot_hz: float = 2.0,
                 record_path: str | os.PathLike | None = None, meta: dict | None = None, weight_bytes: int = 0,
                 flush_s: float = FLUSH_S, stats_every_s: float = 5.0, keyframe_interval_s: float = 10.0,
                 file_flush_s: float = FILE_FLUSH_S, record_claim=None, record_force: bool = False) -> None:
        self.sender = BatchSender(out_queue)
        self.sample_hz = float(sample_hz)
        self.snapshot_hz = float(snapshot_hz)
        self.record_path = os.fspath(record_path) if record_path else None
        self.record_claim = record_claim  # (device, inode) of the file the parent claimed (probes.outfile.adopt)
        self.record_force = record_force  # no claim: replace an existing (finished) file at record_path
        self.meta = dict(meta or {})
        self.weight_bytes = int(weight_bytes)
        self.flush_s = flush_s
        self.file_flush_s = file_flush_s
        self._file_pending: list[Event] = []
        self._next_file_write = 0.0
        self.stats_every_s = stats_every_s
        self.keyframe_interval_s = keyframe_interval_s
        self.step = 0
        self.tokens = 0
        self.recorder: SessionRecorder | None = None
        self.sampler = None
        self._pool = None
        self._lock = threading.Lock()
        self._buffer: list = []  # events, and the open op batch as a mutable _PendingOps
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t_start = time.monotonic()
        self._next_snapshot = 0.0
        self._workload_side_s = 0.0
        self._num_snapshots = 0
        self._snapshot_s = 0.0
        self._thread_cpu_s = 0.0
        self._period = 1.0 / self.sample_hz if self.sample_hz > 0 else float("inf")
        self._sample_lock = threading.Lock()  # the sampler's maxima are updated by one thread at a time
        self._last_sample_t = 0.0  # monotonic time of the newest sample, by either thread
        self._thread_sampled = False  # the newest sample was the probe thread's (a stall: sample every period)
        self._num_ops = 0
        self._keyframe_ops = 0
        self._keyframe_t: float | None = None
        self.keyframe_max_ops = 20000
        self._reported_drops = 0
        self.record_error: str | None = None
        self.stopped = False

    # ---- setup -----------------------------------------------------------------------------------------------
    def attach_pool(self, pool) -> None:
        """Listen to the pool's ops and take its snapshots from ``tick`` (pool backends only). Takes a first
        keyframe now, so every later instant can be rebuilt from a keyframe plus ops."""
        self._pool = pool
        pool.add_op_listener(self._on_op)
        self.meta["geometry"] = msgspec.to_builtins(pool.config)
        if self.sampler is not None:  # already started; otherwise start() takes it
            self.sampler.attach_pool(pool)
            self._take_snapshot()

    def start(self) -> None:
        """Open the recording, emit the meta event and start the probe thread."""
        from probes.sampler import MemorySampler

        sampler = MemorySampler(self.weight_bytes)  # imports mlx/psutil before the clock starts
        full_meta = collect_meta(self.meta)
        self._t_start = time.monotonic()
        full_meta.update(sample_hz=self.sample_hz, snapshot_hz=self.snapshot_hz, t_start=self._t_start)
        full_meta.setdefault("session_id", new_session_id())
        self.meta = full_meta
        if self.record_path:
            self.recorder = SessionRecorder(self.record_path, full_meta, self._t_start,
                                            claim_token=self.record_claim, force=self.record_force)
        self.sender.send([MetaUpdate(t=self._t_start, meta=full_meta)])
        self.sampler = sampler
        if self._pool is not None:
            sampler.attach_pool(self._pool)  # every sample reads the pool's byte counters, not the last snapshot
            self._take_snapshot()
        self._take_sample(by_thread=False)
        self._thread = threading.Thread(target=self._run, name="slabscope-probes", daemon=True)
        self._thread.start()

    # ---- recording files --------------------------------------------------------------------------------------
    @property
    def recording_path(self) -> str | None:
        """The file the recording is written to now (None: not recording)."""
        recorder = self.recorder
        return recorder.path if recorder is not None else None

    @property
    def recording_bytes(self) -> int:
        """Bytes written to the current recording file so far."""
        recorder = self.recorder
        return recorder.bytes_written if recorder is not None else 0

    def rotate_recording(self, path: str | os.PathLike, meta: dict | None = None) -> None:
        """Workload thread: continue the recording in a new file ``path`` (created as any recording is, by
        ``SessionRecorder``). Everything emitted before this call goes to the current file, which then ends with an
        END record whose summary names ``path``; everything after goes to ``path``, which starts with its own META
        (this session's, ``meta`` merged in, a new session id) and, for a pool, a keyframe taken now, so either
        file opens on its own. The switch happens at the probe thread's next file write."""
        with self._lock:
            self._buffer.append(_Rotation(os.fspath(path), dict(meta or {})))
        if self._pool is not None:
            self._keyframe_t = None  # the next snapshot carries the bookkeeping state: the new file's first keyframe
            self._take_snapshot()

    def _write_recording(self, pending: list) -> None:
        """Probe thread: ``pending`` events to the recording, switching files at each rotation marker."""
        chunk: list[Event] = []
        for item in pending:
            if isinstance(item, _Rotation):
                self.recorder.write(chunk)
                chunk = []
                self._switch_file(item)
            else:
                chunk.append(item)
        self.recorder.write(chunk)

    def _switch_file(self, rotation: "_Rotation") -> None:
        meta = {k: v for k, v in self.meta.items() if k not in ("session_id", "t_start", "format_version")}
        meta.update(rotation.meta, session_id=new_session_id())
        successor = SessionRecorder(rotation.path, meta, self._t_start)
        self.recorder.close({"continued_in": os.path.basename(rotation.path)}, t=time.monotonic())
        self.recorder = successor

    # ---- workload thread -------------------------------------------------------------------------------------
    def _push(self, event: Event) -> None:
        with self._lock:
            self._buffer.append(event)

    def _on_op(self, op) -> None:
        """Pool op listener (workload thread): stamps the op and appends it to the open op batch."""
        start = time.perf_counter()
        now = time.monotonic()
        self._num_ops += 1
        with self._lock:
            buf = self._buffer
            if not buf or not isinstance(buf[-1], _PendingOps):
                buf.append(_PendingOps(now, self.step, self.tokens))
            buf[-1].ops.append(op)
            buf[-1].times.append(now)
        self._workload_side_s += time.perf_counter() - start

    def emit(self, event: Event) -> None:
        """Queue a workload event (phase/step/log/error/gather/fused/...): recorded and forwarded; an event not
        stamped yet (``t == 0``) gets the time and counters of now."""
        if not isinstance(event, Event):
            raise TypeError(f"WorkerProbes.emit takes a probes.events.Event, got {type(event).__name__}")
        start = time.perf_counter()
        if not event.t:
            event = msgspec.structs.replace(event, t=time.monotonic(), step=self.step, tokens=self.tokens)
        self._push(event)
        self._workload_side_s += time.perf_counter() - start

    def tick(self, step: int, tokens: int) -> None:
        """Step boundary (workload thread): update counters; take a memory sample and a pool snapshot if due."""
        start = time.perf_counter()
        self.step, self.tokens = int(step), int(tokens)
        now = time.monotonic()
        if self.sampler is not None and now - self._last_sample_t >= self._period:
            self._take_sample(by_thread=False)
        if self._pool is not None and now >= self._next_snapshot:
            self._take_snapshot()
        self._workload_side_s += time.perf_counter() - start

    def _take_sample(self, by_thread: bool) -> None:
        """One memory sample, queued (either thread; one at a time, queued in the order taken: the sampler's maxima
        are not thread-safe and a recording's samples run forward in time)."""
        with self._sample_lock:
            sample = self.sampler.sample(self.step, self.tokens)
            self._last_sample_t, self._thread_sampled = sample.t, by_thread
            self._push(sample)

    def _stalled(self, now: float) -> bool:
        """Whether the probe thread samples now: a period after its own sample (a stall goes on), or
        ``STALL_PERIODS`` after the workload thread's (a step longer than that: it has stopped ticking)."""
        return now - self._last_sample_t >= self._period * (1 if self._thread_sampled else STALL_PERIODS)

    def _take_snapshot(self) -> None:
        """Snapshot the pool (workload thread). A keyframe (with the bookkeeping state, ``book_state``) is
        flagged every ``keyframe_interval_s`` or ``keyframe_max_ops`` ops, and for the first snapshot."""
        start = time.perf_counter()
        snap = self._pool.snapshot()
        now = time.monotonic()
        self._next_snapshot = now + (1.0 / self.snapshot_hz if self.snapshot_hz > 0 else float("inf"))
        book = None
        if (self._keyframe_t is None or now - self._keyframe_t >= self.keyframe_interval_s
                or self._num_ops - self._keyframe_ops >= self.keyframe_max_ops):
            book = self._pool.book_state()
            self._keyframe_t, self._keyframe_ops = now, self._num_ops
        self._push(SnapshotTaken(t=now, step=self.step, tokens=self.tokens, snapshot=snap, keyframe=book is not None,
                                 book_state=book))
        self._num_snapshots += 1
        self._snapshot_s += time.perf_counter() - start

    def stop(self, summary: dict | None = None) -> dict:
        """Final snapshot, stop the probe thread, flush, close the recording (END) and emit "done".

        Returns the summary as recorded (with ``probe_overhead`` added, and ``recording``: its path and the error
        that stopped it, None when it holds the whole run). Idempotent."""
        if self.stopped:
            return dict(summary or {})
        self.stopped = True
        if self._pool is not None:
            self._keyframe_t = None  # the final state is a keyframe: the end of a session seeks instantly
            self._take_snapshot()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.sampler is not None:
            self._take_sample(by_thread=False)
        summary = dict(summary or {}, probe_overhead=msgspec.to_builtins(self.overhead()))
        self._flush(final=True)
        return self._finish(summary, time.monotonic())

    def abort(self, text: str) -> None:
        """End the session from *another* thread while the workload thread may be stuck (a rank whose peer died):
        record a ``WorkerError``, stop the probe thread, flush, and close the recording with ``{"error": text}``.
        Takes no pool snapshot (the workload thread may be mid-mutation). Idempotent with ``stop``."""
        if self.stopped:
            return
        self.stopped = True
        now = time.monotonic()
        self._push(WorkerError(t=now, step=self.step, tokens=self.tokens, text=text))
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        summary = {"error": text, "probe_overhead": msgspec.to_builtins(self.overhead())}
        self._flush(final=True)
        self._finish(summary, now)

    def _finish(self, summary: dict, now: float) -> dict:
        """Close the recording (its END record holds ``summary``) and send ``Done``; a failure to write the END
        stops the recording like a failed flush. Returns the summary sent, with its ``recording`` block."""
        tail: list[Event] = []
        if self.recorder is not None and self.record_error is None:
            try:
                self.recorder.close(dict(summary, recording=self._recording_block()), t=now)
            except OSError as exc:
                self._record_failed(exc, now, tail)
        if self.recorder is not None:
            summary = dict(summary, recording=self._recording_block())
        self.sender.send([*tail, Done(t=now, step=self.step, tokens=self.tokens, summary=summary)])
        return summary

    def _recording_block(self) -> dict:
        """``summary["recording"]``: where the run was recorded and what stopped the recording (None: nothing)."""
        return {"path": self.record_path, "error": self.record_error}

    def _record_failed(self, exc: Exception, now: float, batch: list) -> None:
        """The recording cannot be written (disk full, a file-size limit, a rotation's file name taken): stop writing
        it, keep the workload running, say so once (an error event, and ``record_error`` in the summary)."""
        self.record_error = f"recording stopped: {getattr(exc, 'strerror', None) or exc} ({self.record_path})"
        try:
            self.recorder.abandon()  # what was written stays readable (a torn tail at most); the lock is dropped
        except OSError:
            pass
        batch.append(WorkerError(t=now, step=self.step, tokens=self.tokens, text=self.record_error))

    # ---- probe thread ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        """The probe thread: wakes for the next flush or ProbeStats, and every sample period while it samples a
        stall. A stall (the workload has not sampled for ``STALL_PERIODS`` periods) is looked for at the flush
        wake-ups only: a wake-up timed for it would come every few periods while the workload ticks, for nothing
        (each costs a timed wait and a GIL hand-over). So a stall's first sample can come up to ``flush_s`` late."""
        now = time.monotonic()
        next_flush, next_stats = now + self.flush_s, now + self.stats_every_s
        cpu0 = time.thread_time()
        while True:
            if self._stop.wait(max(0.0, self._next_wake(next_flush, next_stats) - time.monotonic())):
                break
            now = time.monotonic()
            if self._stalled(now):
                self._take_sample(by_thread=True)
            if now >= next_stats:
                self._push(ProbeStats(t=now, step=self.step, tokens=self.tokens, overhead=self.overhead()))
                next_stats = now + self.stats_every_s
            if now >= next_flush:
                self._flush()
                next_flush = now + self.flush_s
            self._thread_cpu_s = time.thread_time() - cpu0
        self._thread_cpu_s = time.thread_time() - cpu0

    def _next_wake(self, next_flush: float, next_stats: float) -> float:
        """When the probe thread wakes next: the next flush or ProbeStats, or a period after its own sample while it
        samples a stall; never for a sample the workload thread may take first."""
        wake = min(next_flush, next_stats)
        return min(wake, self._last_sample_t + self._period) if self._thread_sampled else wake

    def _flush(self, final: bool = False) -> None:
        """Move pending events to the parent now and to the recording every ``file_flush_s`` (or when final);
        report new queue drops as an event."""
        with self._lock:
            pending, self._buffer = self._buffer, []
        items = [item.event() if isinstance(item, _PendingOps) else item for item in pending]
        batch = [item for item in items if not isinstance(item, _Rotation)]  # markers are for the file only
        drops = self.sender.dropped_batches
        if drops != self._reported_drops:
            dropped = Dropped(t=time.monotonic(), step=self.step, tokens=self.tokens, batches=drops,
                              events=self.sender.dropped_events)
            batch.append(dropped)
            items.append(dropped)
            self._reported_drops = drops
        if self.recorder is not None and self.record_error is None:
            self._file_pending.extend(items)
            now = time.monotonic()
            if final or now >= self._next_file_write:
                self._next_file_write = now + self.file_flush_s
                pending, self._file_pending = self._file_pending, []
                try:
                    self._write_recording(pending)
                except (OSError, RecordingError) as exc:  # disk full, a name taken (a rotation), etc.
                    self._record_failed(exc, now, batch)
        if batch:
            self.sender.send(batch)

    # ---- figures ---------------------------------------------------------------------------------------------
    def overhead(self) -> ProbeOverhead:
        """Measured probe cost so far: probe-thread CPU, workload-thread time inside probes, per-sample cost."""
        wall = max(time.monotonic() - self._t_start, 1e-9)
        sampler = self.sampler
        samples = sampler.num_samples if sampler else 0
        return ProbeOverhead(
            wall_s=round(wall, 3),
            probe_thread_cpu_s=round(self._thread_cpu_s, 4),
            workload_thread_s=round(self._workload_side_s, 4),
            cost_fraction=round((self._thread_cpu_s + self._workload_side_s) / wall, 5),
            samples=samples,
            sample_cost_us_mean=round(sampler.total_cost_s / samples * 1e6, 1) if samples else 0.0,
            snapshots=self._num_snapshots,
            snapshot_cost_ms_mean=round(self._snapshot_s / self._num_snapshots * 1e3, 3) if self._num_snapshots
            else 0.0,
            dropped_batches=self.sender.dropped_batches,
        )


class _Rotation:
    """Where the recording continues (``rotate_recording``): a marker in the event buffer, never sent or recorded."""

    __slots__ = ("path", "meta")

    def __init__(self, path: str, meta: dict) -> None:
        self.path, self.meta = path, meta


class _PendingOps:
    """The op batch being filled by the listener (mutable, owned by the probes' lock); frozen at flush."""

    __slots__ = ("t", "step", "tokens", "ops", "times")

    def __init__(self, t: float, step: int, tokens: int) -> None:
        self.t, self.step, self.tokens = t, step, tokens
        self.ops: list = []
        self.times: list[float] = []

    def event(self) -> OpBatch:
        return OpBatch(t=self.t, step=self.step, tokens=self.tokens, ops=self.ops, op_t=self.times)


def redirect_output(log_path: str | os.PathLike) -> None:
    """Point this process's stdout/stderr (file descriptors 1 and 2) at ``log_path`` (append), so a stray print in
    a worker cannot corrupt the parent's terminal. Call first thing in a worker process."""
    import sys

    fd = os.open(os.fspath(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
