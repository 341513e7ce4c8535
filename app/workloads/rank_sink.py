"""What one rank's workload events go through: progress lines, the single ending, and the sink that keeps the ranks
in lockstep (``RankSink`` wraps the ordinary probes sink: syncs at phase starts, every few seconds of steps and at
the end, and the ``distributed`` meta block). Used by ``app.workloads.rank_main``."""

from __future__ import annotations

import os
import sys
import threading
import time

MIB = 1024 * 1024
STATUS_EVERY_S = 5.0


class RankConsole:
    """Progress lines for the launcher's output (called with every probe event, from the probe thread)."""

    def __init__(self, label: str, rank: int, stream=None):
        self.label, self.rank = label, rank
        self.stream = stream or sys.stdout
        self.footprint = 0
        self._next_status: float | None = None  # the first status line comes STATUS_EVERY_S into the run

    def say(self, text: str) -> None:
        self.stream.write(f"[{self.label}] {text}\n")
        self.stream.flush()

    def __call__(self, event: dict) -> None:
        kind = event.get("kind")
        if kind == "sample":
            self.footprint = int(event.get("footprint", 0))
            if self._next_status is None:
                self._next_status = time.monotonic() + STATUS_EVERY_S
        if self.rank != 0:
            return
        if kind == "phase":
            self.say(f"phase {event.get('name')} {event.get('edge')} (step {event.get('step')})")
        elif kind == "sample" and time.monotonic() >= self._next_status:
            self._next_status = time.monotonic() + STATUS_EVERY_S
            self.say(f"step {event.get('step')} tokens {event.get('tokens')} "
                     f"max(act+cache) now {self.footprint / MIB:.1f} MiB")

    def done(self, summary: dict) -> None:
        foot = summary.get("footprint", {})
        outputs = summary.get("outputs", {})
        peak = foot.get("max_footprint_bytes", 0)
        self.say(f"done: {summary.get('steps')} steps, {outputs.get('generated_tokens')} tokens generated "
                 f"(outputs {outputs.get('digest', '?')[:12]}), max(act+cache) {peak / MIB:.1f} MiB, "
                 f"clock residual skew {1e3 * (summary.get('distributed', {}).get('residual_skew_s') or 0):.3f} ms")

    def failed(self, text: str) -> None:
        self.say(f"FAILED: {text}")


class RankEnding:
    """Ends the rank exactly once: a normal finish or an error (main thread), or an abort (watchdog thread,
    while the main thread may be stuck in a collective). Owns the lock that orders them."""

    def __init__(self, console: RankConsole):
        self.console = console
        self.sink: RankSink | None = None
        self.exit_code = 0
        self._lock = threading.Lock()
        self._ended = False

    def finish(self, close):
        with self._lock:
            if self._ended:
                return None
            self._ended = True
            return close()

    def fail(self, text: str, tb: str) -> int:
        with self._lock:
            if not self._ended:
                self._ended, self.exit_code = True, 1
                if self.sink is not None:
                    self.sink.close_with_error(text, tb)
                self.console.failed(text)
        return self.exit_code

    def abort(self, text: str, code: int) -> None:
        """Watchdog thread: record the error, close the recording and exit the process now."""
        if self._lock.acquire(timeout=10.0) and not self._ended:
            self._ended, self.exit_code = True, code
            if self.sink is not None:
                self.sink.abort(text)
            self.console.failed(text)
        sys.stdout.flush()
        os._exit(self.exit_code)


class RankSink:
    """Wraps the ordinary probes sink (``worker_sink.make_sink``): syncs at phase starts, every few seconds of
    steps and at the end (``RankSync``), beats the watchdog, and puts the ``distributed`` block in the meta."""

    def __init__(self, inner, sync, watchdog, ending: RankEnding, dist_meta: dict, console: RankConsole):
        self.inner, self.sync, self.watchdog, self.ending = inner, sync, watchdog, ending
        self.dist_meta, self.console = dist_meta, console
        self.session = None

    def _digest(self) -> int:
        from app.workloads.outputs import outputs_summary

        if self.session is None:
            return 0
        scheduler = self.session.scheduler
        return int(outputs_summary(scheduler.finished, scheduler.running)["digest"][:15], 16)

    def _sync(self, reason: str, step: int, tokens: int) -> None:
        self.inner.emit(dict(self.sync.sync(reason, step, tokens, self._digest), t=time.monotonic()))

    def emit(self, event: dict) -> None:
        self.watchdog.beat()
        if event.get("kind") == "phase" and event.get("edge") == "start":
            self._sync("phase", int(event.get("step", 0)), int(event.get("tokens", 0)))
        self.inner.emit(event)

    def tick(self, step: int, tokens: int) -> None:
        self.watchdog.beat()
        self.inner.tick(step, tokens)
        if self.sync.due(step):
            self._sync("step", step, tokens)

    def attach(self, meta: dict, session) -> None:
        self.session = session
        self.inner.attach(dict(meta, distributed=self.dist_meta), session)

    def finish(self, summary: dict) -> dict:
        """Normal end (``before_close``): a last sync, then the probes' summary and END record."""
        self._sync("end", int(summary.get("steps", 0)), _tokens(summary))
        self.watchdog.disarm()
        summary = dict(summary, distributed=self.sync.summary())
        sent = self.ending.finish(lambda: self.inner.finish(summary))
        if sent is not None:
            self.console.done(sent)
        return sent if sent is not None else summary

    def close_with_error(self, text: str, tb: str) -> None:
        """Main thread, after an exception: the error event and an END record saying so (no collective)."""
        self.watchdog.disarm()
        self.inner.emit({"kind": "error", "t": time.monotonic(), "text": text, "traceback": tb})
        self.inner.finish({"error": text, "distributed": self.sync.summary()})

    def abort(self, text: str) -> None:
        probes = getattr(self.inner, "probes", None)
        if probes is not None:
            probes.abort(text)


def _tokens(summary: dict) -> int:
    return int(summary.get("prefill_tokens", 0)) + int(summary.get("decode_tokens", 0))
