"""Worker -> parent transport: batches of typed events into a bounded queue that never blocks the worker.

Each item put on a queue is one *batch*, encoded at this boundary: ``(number of events, msgpack bytes)``
(``encode_batch``); the parent turns it back into typed events with one validated decode (``decode_batch``), so
a worker that sent something malformed is caught at the boundary, not deep in a view. The probes flush every
~75 ms. When the queue is full the oldest batch still in it is dropped (taken back by the sender) and counted; if
none can be taken back (the reader holds them all in flight) the new batch is dropped instead. Either way ``send``
returns at once. Drop counts are reported downstream as ``Dropped`` events by ``probes.live``. In-process sinks
(a callable, or None: the ``sink`` list) get the typed events themselves: no boundary, no bytes.
"""

from __future__ import annotations

import queue
from typing import Any, Callable

import msgspec

from probes.events import Event, any_event

_ENCODER = msgspec.msgpack.Encoder()
_DECODER: list = []  # built on first use, once every event type is defined


def encode_batch(batch: list[Event]) -> tuple[int, bytes]:
    return len(batch), _ENCODER.encode(batch)


def decode_batch(item) -> list[Event]:
    """The typed events of one queue item (an encoded batch); ``msgspec.ValidationError``/``DecodeError`` when
    it is not one."""
    if not _DECODER:
        _DECODER.append(msgspec.msgpack.Decoder(list[any_event()]))
    _count, payload = item
    return _DECODER[0].decode(payload)


class BatchSender:
    """Sends batches to ``out``: a bounded queue (``put_nowait``/``get_nowait``: ``queue.Queue`` or
    ``multiprocessing.Queue``), a callable taking one event, or None (kept in ``self.sink``, a list of events).

    Mutates only its own counters and, for queues, the queue.
    """

    def __init__(self, out: Any = None) -> None:
        self.out = out
        self.sink: list[Event] = []
        self.dropped_batches = 0
        self.dropped_events = 0
        self.sent_batches = 0

    def send(self, batch: list[Event]) -> None:
        """Deliver one batch without blocking (drop oldest when the queue is full)."""
        if not batch:
            return
        out = self.out
        if out is None:
            self.sink.extend(batch)
        elif callable(out) and not hasattr(out, "put_nowait"):
            deliver: Callable[[Event], None] = out
            for event in batch:
                deliver(event)
        else:
            self._put(encode_batch(batch))
        self.sent_batches += 1

    def _put(self, item: tuple[int, bytes]) -> None:
        try:
            self.out.put_nowait(item)
            return
        except queue.Full:
            pass
        try:
            oldest = self.out.get_nowait()
            self._count_drop(oldest)
        except (queue.Empty, OSError, EOFError):
            self._count_drop(item)
            return
        try:
            self.out.put_nowait(item)
        except queue.Full:
            self._count_drop(item)

    def _count_drop(self, item) -> None:
        self.dropped_batches += 1
        self.dropped_events += item[0] if isinstance(item, tuple) else 1
