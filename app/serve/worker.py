"""The engine worker of ``slabscope serve``: the process that imports mlx, runs the model and is profiled.

``worker_main`` (spawned by ``app.serve.engine_client.EngineProcess``): stdout/stderr to a log file, OpenBLAS before
mlx, the model loaded, a ``ServingEngine`` built, the probes started (memory samples, pool snapshots, the recording
in segments when ``record_dir`` is set, probe batches to the front for ``/metrics``), then ``Ready`` and the loop:

* drain the front's messages (``Submit``/``Cancel``/``Inspect``/``Shutdown``), blocking up to ``IDLE_S`` only when
  nothing runs, so a request joins the batch at the next step;
* one engine step while anything runs, its tokens to the front;
* on idle: a shrink point and a probes tick every ``IDLE_S``;
* a recording segment past its size: the next one (``app.serve.segments``).

It ends on ``Shutdown``, on a front that is gone (``app.workloads.parent_watch``: no worker outlives its server), or
on an error (a ``Fatal`` message with the traceback, then the probes close the recording). Whatever happens, the
recording is closed with an END record when the process can still run Python; a SIGKILL loses at most the last
half second (``probes.live``).
"""

from __future__ import annotations

import os
import pickle
import queue as queue_mod
import socket
import threading
import time
import traceback

from app.serve import protocol as proto
from app.serve.config import WorkerConfig

IDLE_S = 0.05            # longest wait for a message while nothing runs (also the idle points' period)
MAX_DRAIN = 256          # messages handled between two steps at most (a flood cannot starve the batch)


def worker_main(config: WorkerConfig, to_engine, to_front, probe_queue, parent_pid: int) -> None:
    """Entry point of the spawned engine process (see the module docstring)."""
    from probes.live import redirect_output

    redirect_output(config.log_path)
    if config.spec.blas_threads:
        os.environ["OPENBLAS_NUM_THREADS"] = str(config.spec.blas_threads)
    from app.models.blas import enable_openblas

    enable_openblas()
    stop = threading.Event()
    from app.workloads.parent_watch import ParentWatch

    watch = ParentWatch(parent_pid, lambda text: stop.set()).start()
    try:
        EngineLoop(config, to_engine, to_front, probe_queue, stop).run()
    except BaseException as exc:  # noqa: BLE001 - the front must hear why the engine stopped
        to_front.put(proto.encode(proto.Fatal(text=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())))
    finally:
        watch.stop()
        to_front.close()
        to_front.join_thread()  # flush what was sent before the process exits


class EngineLoop:
    """Owns the serving engine, the probes and the recording segments of one worker (see the module docstring)."""

    def __init__(self, config: WorkerConfig, to_engine, to_front, probe_queue, stop: threading.Event) -> None:
        self.config = config
        self.to_engine, self.to_front, self.probe_queue = to_engine, to_front, probe_queue
        self.stop = stop
        self.probes = None
        self.serving = None
        self.segments = None
        self.shutdown_asked = False

    # ---- setup -----------------------------------------------------------------------------------------------
    def run(self) -> None:
        from app.models import load_model
        from app.serve.serving import build_serving

        spec = self.config.spec
        loaded = load_model(spec.model, dtype=spec.dtype, device=spec.device, seed=spec.seed)
        decoder = pickle.dumps(getattr(loaded.tokenizer, "_tokenizer", loaded.tokenizer))  # before any work
        self.serving = build_serving(spec, loaded, self.config.limits,
                                     prefix_cache_blocks=self.config.prefix_cache_blocks,
                                     emit=self._emit, tick=self._tick)
        error = None
        try:
            self._start_probes(loaded)
            self._send(proto.Ready(info=self._info(loaded), decoder=decoder))
            self._serve()
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._finish(error)

    def _start_probes(self, loaded) -> None:
        from app.serve.segments import Segments
        from probes.live import WorkerProbes

        spec, session = self.config.spec, self.serving.session
        record_path = None
        if self.config.record_dir:
            self.segments = Segments(self.config.record_dir, spec.backend, segment_bytes=self.config.segment_bytes,
                                     keep=self.config.keep_segments)
            record_path = self.segments.next_path()
        meta = dict(session.meta(), serve=self._serve_meta(0))
        self.probes = WorkerProbes(self.probe_queue, sample_hz=spec.sample_hz, snapshot_hz=spec.snapshot_hz,
                                   record_path=record_path, meta=meta, weight_bytes=loaded.weight_bytes)
        if session.pool is not None:
            self.probes.attach_pool(session.pool)
        self.probes.start()

    def _serve_meta(self, segment: int) -> dict:
        return {"server_id": self.config.server_id, "segment": segment, "front_pid": os.getppid(),
                "url": self.config.front_url, "host": socket.gethostname(),
                "limits": {"max_running": self.config.limits.max_running,
                           "max_waiting": self.config.limits.max_waiting,
                           "default_max_tokens": self.config.limits.default_max_tokens}}

    def _info(self, loaded) -> dict:
        return {"model": loaded.name, "family": loaded.family, "dtype": loaded.dtype, "device": loaded.device,
                "backend": self.config.spec.backend, "max_positions": loaded.max_positions,
                "vocab_size": loaded.vocab_size, "eos_token_ids": sorted(loaded.eos_token_ids), "pid": os.getpid(),
                "recording": str(self.segments.current) if self.segments else None,
                "pool_params": dict(self.serving.session.pool_params)}

    # ---- the loop --------------------------------------------------------------------------------------------
    def _serve(self) -> None:
        serving = self.serving
        next_idle = time.monotonic()
        while not self.stop.is_set() and not self.shutdown_asked:
            for message in self._drain(block=not serving.busy()):
                self._handle(message)
            if self.shutdown_asked:
                return
            if serving.busy():
                self._send_tokens(serving.step())
            elif time.monotonic() >= next_idle:
                serving.idle_point()
                next_idle = time.monotonic() + IDLE_S
            for rejected in serving.late_rejections:
                self._send(rejected)
            serving.late_rejections.clear()
            self._rotate_if_due()

    def _drain(self, block: bool) -> list:
        messages = []
        try:
            if block:
                messages.append(self.to_engine.get(timeout=IDLE_S))
            while len(messages) < MAX_DRAIN:
                messages.append(self.to_engine.get_nowait())
        except queue_mod.Empty:
            pass
        return [proto.decode_for_engine(raw) for raw in messages]

    def _handle(self, message) -> None:
        serving = self.serving
        if isinstance(message, proto.Submit):
            self._send(serving.submit(message))
        elif isinstance(message, proto.Cancel):
            self._send_tokens(serving.cancel(message))
        elif isinstance(message, proto.Inspect):
            self._send(proto.State(qid=message.qid, state=serving.inspect(message.check)))
        elif isinstance(message, proto.Shutdown):
            self.shutdown_asked = True

    def _send_tokens(self, tokens: proto.Tokens | None) -> None:
        if tokens is not None and tokens.items:
            self._send(tokens)

    def _send(self, message: proto.Message) -> None:
        self.to_front.put(proto.encode(message))

    def _rotate_if_due(self) -> None:
        segments, probes = self.segments, self.probes
        if segments is None or not segments.due(probes.recording_bytes, probes.recording_path):
            return
        path = segments.next_path()
        probes.rotate_recording(path, {"serve": self._serve_meta(segments.number)})
        segments.prune()

    # ---- events ----------------------------------------------------------------------------------------------
    def _emit(self, event) -> None:
        if self.probes is not None:
            self.probes.emit(event)

    def _tick(self, step: int, tokens: int) -> None:
        if self.probes is not None:
            self.probes.tick(step, tokens)

    def _finish(self, error: str | None) -> None:
        """Cancel what is left, close the recording (END, with ``error`` when the loop failed), release the
        session."""
        serving = self.serving
        reason = "shutdown" if self.shutdown_asked else ("error" if error else "server gone")
        try:
            for rid in list(serving.live):
                serving.cancel(proto.Cancel(rid=rid, reason=reason))
            summary = {"serve": {"requests_finished": serving.finished_total, "steps": serving.steps,
                                 "tokens": serving.tokens, "stopped_by": reason},
                       **serving.session.pool_summary(), **({"error": error} if error else {})}
            if self.probes is not None:
                self.probes.stop(summary)
        finally:
            serving.session.close()
