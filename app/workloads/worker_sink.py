"""Where a run's events go: through ``probes.live.WorkerProbes`` when importable, else straight to the queue.

``make_sink(queue, spec)`` returns an object with ``emit(event)``, ``tick(step, tokens)``,
``attach(meta, session)`` (called by ``run_workload`` once model and pool exist) and ``finish(summary)``
(sends ``done``). Before ``attach``, events are held (the probes send ``meta`` first when they start).
"""

from __future__ import annotations

import time


def make_sink(out_queue, spec):
    """``out_queue``: a multiprocessing queue (worker) or a callable taking one event (in-process runs)."""
    try:
        from probes.live import WorkerProbes  # noqa: F401
    except ImportError:
        return DirectSink(out_queue, spec)
    return ProbesSink(out_queue, spec)


def _deliver(out, batch: list[dict]) -> None:
    """To a queue (blocking put with a bound: a parent that stopped reading must not hang the worker forever) or
    to a callable taking one event (in-process runs)."""
    if hasattr(out, "put"):
        out.put(batch, timeout=5.0)
    else:
        for event in batch:
            out(event)


class ProbesSink:
    """Routes events through WorkerProbes (sampling, snapshots, recording, batched transport)."""

    def __init__(self, out_queue, spec):
        self.queue, self.spec = out_queue, spec
        self.probes = None
        self._held: list[dict] = []

    def emit(self, event: dict) -> None:
        if self.probes is None:
            if event.get("kind") != "meta":  # the probes send their own meta (built from ours) at start
                self._held.append(event)
            return
        self.probes.emit(event)

    def tick(self, step: int, tokens: int) -> None:
        if self.probes is not None:
            self.probes.tick(step, tokens)

    def attach(self, meta: dict, session) -> None:
        from probes.live import WorkerProbes

        self.probes = WorkerProbes(self.queue, sample_hz=self.spec.sample_hz, snapshot_hz=self.spec.snapshot_hz,
                                   record_path=self.spec.record_path, meta=meta,
                                   weight_bytes=session.loaded.weight_bytes)
        if session.pool is not None:
            self.probes.attach_pool(session.pool)
        self.probes.start()
        for event in self._held:
            self.probes.emit(event)
        self._held.clear()

    def finish(self, summary: dict) -> dict:
        """Send ``done`` (through the probes when running); returns the summary as sent."""
        if self.probes is not None:
            return self.probes.stop(summary)
        now = time.monotonic()
        _deliver(self.queue, [*self._held, {"kind": "done", "t": now, "step": 0, "tokens": 0, "summary": summary}])
        return summary


class DirectSink:
    """No probes: forward events as one-event batches, pool snapshots at ``snapshot_hz`` from ``tick``."""

    def __init__(self, out_queue, spec):
        self.queue, self.spec = out_queue, spec
        self.pool = None
        self._next_snapshot = 0.0
        self._step = self._tokens = 0

    def emit(self, event: dict) -> None:
        _deliver(self.queue, [event])

    def tick(self, step: int, tokens: int) -> None:
        self._step, self._tokens = step, tokens
        now = time.monotonic()
        if self.pool is not None and self.spec.snapshot_hz > 0 and now >= self._next_snapshot:
            self._next_snapshot = now + 1.0 / self.spec.snapshot_hz
            self.emit({"kind": "snapshot", "t": now, "step": step, "tokens": tokens, "snapshot": self.pool.snapshot()})

    def attach(self, meta: dict, session) -> None:
        self.pool = session.pool

    def finish(self, summary: dict) -> dict:
        self.emit({"kind": "done", "t": time.monotonic(), "step": self._step, "tokens": self._tokens,
                   "summary": summary})
        return summary
