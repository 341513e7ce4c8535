"""The front's handle on its engine worker (mlx-free): the process, the two message queues, and what arrives.

``EngineProcess.start()`` spawns ``app.serve.worker.worker_main``; a reader thread takes the worker's messages and
hands them to the asyncio loop (``loop.call_soon_threadsafe``), where ``RequestStream``s, the ``Ready`` future and
``Inspect`` futures are completed; a second thread reads the probes' event batches (memory samples, steps) for the
Prometheus metrics and for the last sample a death report cites. The loop never blocks on a queue: sends are
``multiprocessing.Queue.put`` on an unbounded queue (its feeder thread writes the pipe).

A worker that dies (SIGKILL by the out-of-memory killer, a segfault) or fails (``Fatal``) is noticed within
``POLL_S``; every open request then ends with a 503 error that says what is known (``dead``), and so does every
later one: the front stays up to say why, and ``/health`` answers 503 with the same text.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import queue as queue_mod
import signal
import threading
import time

import msgspec

from app.serve import protocol as proto
from app.serve.config import WorkerConfig
from app.serve.worker import worker_main

POLL_S = 0.2
PROBE_QUEUE_BATCHES = 1024
STOP_WAIT_S = 10.0


class EngineDead(Exception):
    """The engine worker is gone; the message says why (what is known)."""


class RequestStream:
    """One submitted request on the front: ``accepted`` (a future of Accepted/Rejected) and ``updates`` (an
    asyncio queue of ``Progress`` items, then None once it ended, or an ``EngineDead``/``Rejected``)."""

    def __init__(self, rid: int, loop: asyncio.AbstractEventLoop) -> None:
        self.rid = rid
        self.accepted: asyncio.Future = loop.create_future()
        self.updates: asyncio.Queue = asyncio.Queue()


class EngineProcess:
    """Owns the worker process, its queues and threads, the open request streams and the running/waiting counts
    (updated by ``Tokens`` messages). ``on_probe_event(event)`` receives every probe event (metrics)."""

    def __init__(self, config: WorkerConfig, *, on_probe_event=None) -> None:
        self.config = config
        self.on_probe_event = on_probe_event
        self.info: dict = {}
        self.decoder = None
        self.dead: str | None = None
        self.running = self.waiting = 0
        self.last_sample = None
        self.streams: dict[int, RequestStream] = {}
        self._ids = itertools.count(1)
        self._queries: dict[int, asyncio.Future] = {}
        self._ready: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._process = None
        self._closing = threading.Event()

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> "EngineProcess":
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._loop = loop
        self._ready = loop.create_future()
        self.to_engine, self.to_front = ctx.Queue(), ctx.Queue()
        self.probe_queue = ctx.Queue(maxsize=PROBE_QUEUE_BATCHES)
        self._process = ctx.Process(target=worker_main, name=f"slabscope-serve-{self.config.spec.backend}",
                                    args=(self.config, self.to_engine, self.to_front, self.probe_queue, os.getpid()),
                                    daemon=True)
        self._process.start()
        threading.Thread(target=self._read_messages, name="slabscope-serve-reader", daemon=True).start()
        threading.Thread(target=self._read_probes, name="slabscope-serve-probes", daemon=True).start()
        return self

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def ready(self, timeout: float) -> dict:
        """The worker's ``Ready`` info, once the model is loaded; EngineDead when it failed or died first."""
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except asyncio.TimeoutError:
            raise EngineDead(f"the engine did not load the model within {timeout:g} s") from None
        return self.info

    def stop(self, timeout: float = STOP_WAIT_S) -> None:
        """Ask the worker to shut down (it cancels what runs and closes its recording), wait up to ``timeout``,
        then terminate and kill what is left: no process outlives the server. Blocking; idempotent."""
        self._closing.set()
        process = self._process
        if process is None:
            return
        if process.is_alive():
            try:
                self.to_engine.put(proto.encode(proto.Shutdown()))
            except (OSError, ValueError):
                pass
            process.join(timeout)
        for action in (process.terminate, process.kill):
            if not process.is_alive():
                break
            action()
            process.join(2.0)

    # ---- requests ----------------------------------------------------------------------------------------------
    def submit(self, message_for) -> RequestStream:
        """Send ``message_for(rid)`` (a Submit) under a fresh request id; its stream. EngineDead when gone."""
        if self.dead is not None:
            raise EngineDead(self.dead)
        rid = next(self._ids)
        stream = RequestStream(rid, self._loop)
        self.streams[rid] = stream
        self._send(message_for(rid))
        return stream

    def cancel(self, rid: int, reason: str) -> None:
        """End request ``rid`` in the engine (its stream stops receiving); no-op once the engine is gone."""
        if self.streams.pop(rid, None) is not None and self.dead is None:
            self._send(proto.Cancel(rid=rid, reason=reason))

    def release(self, rid: int) -> None:
        """Forget the stream of a request that ended."""
        self.streams.pop(rid, None)

    async def inspect(self, timeout: float = 10.0, check: bool = True) -> dict:
        """The engine's state (``ServingEngine.inspect``) after every message sent before this call."""
        if self.dead is not None:
            raise EngineDead(self.dead)
        qid = next(self._ids)
        future = self._loop.create_future()
        self._queries[qid] = future
        self._send(proto.Inspect(qid=qid, check=check))
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self._queries.pop(qid, None)

    def _send(self, message: proto.Message) -> None:
        self.to_engine.put(proto.encode(message))

    # ---- reader threads ----------------------------------------------------------------------------------------
    def _read_messages(self) -> None:
        while True:
            try:
                raw = self.to_front.get(timeout=POLL_S)
            except queue_mod.Empty:
                if not self._process.is_alive():
                    self._drain_after_exit()
                    return
                continue
            except (OSError, EOFError, ValueError):
                return
            self._to_loop(self._dispatch, proto.decode_for_front(raw))

    def _to_loop(self, fn, *args) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the server has stopped
            pass

    def _drain_after_exit(self) -> None:
        """The worker exited: deliver what it sent last, then say it is gone (unless we stopped it)."""
        while True:
            try:
                raw = self.to_front.get_nowait()
            except (queue_mod.Empty, OSError, EOFError, ValueError):
                break
            self._to_loop(self._dispatch, proto.decode_for_front(raw))
        self._to_loop(self._died, self._death_text())

    def _death_text(self) -> str:
        from app.workloads.worker import describe_memory_at_death

        code = self._process.exitcode
        if self._closing.is_set():
            return "the server is stopping"
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "unknown signal"
            text = f"the engine process was killed by signal {-code} ({name})"
            if -code == signal.SIGKILL:
                text += f"; {describe_memory_at_death(self.last_sample, time.monotonic())}"
            return text
        return f"the engine process exited with code {code}"

    def _read_probes(self) -> None:
        from probes.events import Sample
        from probes.transport import decode_batch

        while self._process.is_alive() or not self.probe_queue.empty():
            try:
                item = self.probe_queue.get(timeout=POLL_S)
            except queue_mod.Empty:
                continue
            except (OSError, EOFError, ValueError):
                return
            try:
                events = decode_batch(item)
            except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError):
                continue
            for event in events:
                if isinstance(event, Sample):
                    self.last_sample = event
                if self.on_probe_event is not None:
                    self.on_probe_event(event)

    # ---- the loop's side ---------------------------------------------------------------------------------------
    def _dispatch(self, message) -> None:
        if isinstance(message, proto.Tokens):
            self.running, self.waiting = message.running, message.waiting
            for item in message.items:
                stream = self.streams.get(item.rid)
                if stream is not None:
                    stream.updates.put_nowait(item)
        elif isinstance(message, (proto.Accepted, proto.Rejected)):
            self._answer(message)
        elif isinstance(message, proto.State):
            future = self._queries.get(message.qid)
            if future is not None and not future.done():
                future.set_result(message.state)
        elif isinstance(message, proto.Ready):
            import pickle

            os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # it would print about PyTorch
            self.info = message.info
            self.decoder = pickle.loads(message.decoder)  # our own child's tokenizer
            if not self._ready.done():
                self._ready.set_result(message.info)
        elif isinstance(message, proto.Fatal):
            self._died(f"the engine failed: {message.text}")

    def _answer(self, message) -> None:
        if isinstance(message, proto.Accepted):
            self.running, self.waiting = message.running, message.waiting
        stream = self.streams.get(message.rid)
        if stream is None:
            return
        if not stream.accepted.done():
            stream.accepted.set_result(message)
        elif isinstance(message, proto.Rejected):  # rejected after it was accepted (the pool cannot hold it)
            stream.updates.put_nowait(message)

    def _died(self, text: str) -> None:
        if self.dead is not None:
            return
        self.dead = text
        error = EngineDead(text)
        if not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved: no "never retrieved" warning when nobody waits on it
        for stream in list(self.streams.values()):
            if not stream.accepted.done():
                stream.accepted.set_exception(error)
                stream.accepted.exception()
            stream.updates.put_nowait(error)
        self.streams.clear()
        for future in self._queries.values():
            if not future.done():
                future.set_exception(error)
