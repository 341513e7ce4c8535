"""Where a run's events go: through ``probes.live.WorkerProbes`` (sampling, snapshots, recording, transport).

``make_sink(queue, spec)`` returns an object with ``emit(event)``, ``tick(step, tokens)``,
``attach(meta, session)`` (called by ``run_workload`` once model and pool exist) and ``finish(summary)``
(sends ``Done``). Before ``attach``, events are held (the probes send the metadata first when they start), except
``RunStage`` events, sent at once (a user waiting on the run sees it load); a run that fails before ``attach``
sends what it held and ``Done`` straight to the queue.
"""

from __future__ import annotations

import time

from probes.events import Done, Event, MetaUpdate, RunStage
from probes.transport import encode_batch


def make_sink(out_queue, spec) -> "ProbesSink":
    """``out_queue``: a multiprocessing queue (worker) or a callable taking one event (in-process runs)."""
    return ProbesSink(out_queue, spec)


def _deliver(out, batch: list[Event]) -> None:
    """To a queue (encoded like the probes' batches; a blocking put with a bound: a parent that stopped reading must
    not hang the worker forever) or to a callable taking one event (in-process runs)."""
    if hasattr(out, "put"):
        out.put(encode_batch(batch), timeout=5.0)
    else:
        for event in batch:
            out(event)


class ProbesSink:
    """Routes events through WorkerProbes (sampling, snapshots, recording, batched transport)."""

    def __init__(self, out_queue, spec):
        self.queue, self.spec = out_queue, spec
        self.probes = None
        self._held: list[Event] = []

    def emit(self, event: Event) -> None:
        if self.probes is None:
            if isinstance(event, RunStage):  # where the run is, said now: nobody should wait on a silent worker
                _deliver(self.queue, [event if event.t else _stamp(event, time.monotonic())])
            elif not isinstance(event, MetaUpdate):  # the probes send their own metadata (built from ours) at start
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
                                   weight_bytes=session.loaded.weight_bytes, record_claim=self.spec.record_claim,
                                   record_force=self.spec.record_force)
        if session.pool is not None:
            self.probes.attach_pool(session.pool)
        self.probes.start()
        for event in self._held:
            self.probes.emit(event)
        self._held.clear()

    def finish(self, summary: dict) -> dict:
        """Send ``Done`` (through the probes when running); returns the summary as sent."""
        if self.probes is not None:
            return self.probes.stop(summary)
        now = time.monotonic()
        held = [event if event.t else _stamp(event, now) for event in self._held]
        _deliver(self.queue, [*held, Done(t=now, summary=summary)])
        return summary


def _stamp(event: Event, t: float) -> Event:
    import msgspec

    return msgspec.structs.replace(event, t=t)
