"""Worker -> parent transport: batches of event dicts into a bounded queue that never blocks the worker.

Each item put on the queue is one *batch*: a ``list`` of event dicts (the probes flush every ~75 ms). When the
queue is full the oldest batch still in it is dropped (taken back by the sender) and counted; if none can be
taken back (the reader holds them all in flight) the new batch is dropped instead. Either way ``send`` returns
at once. Drop counts are reported downstream as ``{"kind": "dropped", ...}`` events by ``probes.live``.
"""

from __future__ import annotations

import queue
from typing import Any, Callable


class BatchSender:
    """Sends batches to ``out``: a bounded queue (``put_nowait``/``get_nowait``: ``queue.Queue`` or
    ``multiprocessing.Queue``), a callable taking one event, or None (kept in ``self.sink``, a list of events).

    Mutates only its own counters and, for queues, the queue.
    """

    def __init__(self, out: Any = None) -> None:
        self.out = out
        self.sink: list[dict] = []
        self.dropped_batches = 0
        self.dropped_events = 0
        self.sent_batches = 0

    def send(self, batch: list[dict]) -> None:
        """Deliver one batch without blocking (drop oldest when the queue is full)."""
        if not batch:
            return
        out = self.out
        if out is None:
            self.sink.extend(batch)
        elif callable(out) and not hasattr(out, "put_nowait"):
            deliver: Callable[[dict], None] = out
            for event in batch:
                deliver(event)
        else:
            self._put(batch)
        self.sent_batches += 1

    def _put(self, batch: list[dict]) -> None:
        try:
            self.out.put_nowait(batch)
            return
        except queue.Full:
            pass
        try:
            oldest = self.out.get_nowait()
            self._count_drop(oldest)
        except (queue.Empty, OSError, EOFError):
            self._count_drop(batch)
            return
        try:
            self.out.put_nowait(batch)
        except queue.Full:
            self._count_drop(batch)

    def _count_drop(self, batch: list[dict]) -> None:
        self.dropped_batches += 1
        self.dropped_events += len(batch) if isinstance(batch, list) else 1
