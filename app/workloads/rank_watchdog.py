"""The rank watchdog: a rank that can no longer make progress stops with a clear error instead of hanging.

mlx's collectives wait forever on a peer that is gone without closing its socket (a host that lost power, a
stopped process, NCCL), and the launcher stops the surviving ranks with SIGTERM when one fails, which Python
cannot handle while the main thread is inside a collective (handlers run between bytecodes). So a thread of its
own watches three things and calls ``on_abort(text, exit_code)`` for the first that happens:

- **no progress**: while armed, the workload must ``beat()`` (every step, phase edge and sync does) at least every
  ``peer_timeout_s``; a step stuck longer is a dead or unreachable peer. Joining the group, loading and the start
  sync (where every rank waits for the slowest to load its model) are armed with ``STARTUP_TIMEOUT_S`` instead
  (a peer that *dies* meanwhile is reported by the launcher's SIGTERM at once; only one that hangs waits this
  long);
- **a stop signal** (SIGTERM from ``mlx.launch``, SIGINT, SIGHUP from a dropped ssh session): the signals get a
  no-op Python handler, so their delivery never kills the process outright, and ``signal.set_wakeup_fd`` hands
  them to this thread at once even while the main thread is blocked;
- **the launcher gone**: the parent process changed (the rank was orphaned).

``on_abort`` owns what happens next (record the error, close the recording, exit the process).
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from typing import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
EXIT_PEER_TIMEOUT = 3
STARTUP_TIMEOUT_S = 600.0
EXIT_ORPHANED = 4


class RankWatchdog:
    """Owns the watchdog thread, the wakeup pipe and the stop-signal handlers of this process."""

    def __init__(self, *, peer_timeout_s: float, on_abort: Callable[[str, int], None], poll_s: float = 0.25):
        if peer_timeout_s <= 0:
            raise ValueError("peer_timeout_s must be > 0")
        self.peer_timeout_s = float(peer_timeout_s)
        self.on_abort = on_abort
        self.poll_s = poll_s
        self._last_beat = time.monotonic()
        self._armed = False
        self._timeout_s = self.peer_timeout_s
        self._parent = os.getppid()
        self._read_fd = self._write_fd = -1
        self._thread: threading.Thread | None = None
        self.fired: str | None = None
        self.checked_silence_s = 0.0  # the silence the latest check saw and let pass (what a test waits on)

    def install(self) -> "RankWatchdog":
        """Main thread only (signal handlers): route stop signals to the watchdog thread and start it."""
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, _ignore_in_python)
        self._thread = threading.Thread(target=self._run, name="slabscope-rank-watchdog", daemon=True)
        self._thread.start()
        return self

    def beat(self) -> None:
        """The workload made progress (any thread; a float store is atomic under the GIL)."""
        self._last_beat = time.monotonic()

    def arm(self, timeout_s: float | None = None) -> None:
        """From now on ``timeout_s`` (default ``peer_timeout_s``) without a beat aborts the rank (call once
        collectives begin; again to change the timeout)."""
        self._timeout_s = self.peer_timeout_s if timeout_s is None else max(float(timeout_s), self.peer_timeout_s)
        self.beat()
        self._armed = True

    def disarm(self) -> None:
        """No more collectives (the run is closing its recording): silence is fine from here."""
        self._armed = False

    # ---- watchdog thread -------------------------------------------------------------------------------------
    def _run(self) -> None:
        while self.fired is None:
            ready, _, _ = select.select([self._read_fd], [], [], self.poll_s)
            if ready:
                sig = _first_signal(os.read(self._read_fd, 64))
                if sig is not None:
                    name = signal.Signals(sig).name
                    why = (" (the run was stopped, or mlx.launch stopped every rank when one failed)"
                           if sig == signal.SIGTERM else "")
                    self._fire(f"{name} received{why}", 128 + sig)
                continue
            silent = time.monotonic() - self._last_beat
            if self._armed and silent > self._timeout_s:
                self._fire(f"no progress for {silent:.1f} s (peer timeout {self._timeout_s:g} s): a peer rank is "
                           "dead or unreachable, and mlx collectives wait forever on a lost peer", EXIT_PEER_TIMEOUT)
            elif os.getppid() != self._parent:
                self._fire(f"the launcher (pid {self._parent}) is gone", EXIT_ORPHANED)
            else:
                self.checked_silence_s = silent

    def _fire(self, text: str, code: int) -> None:
        self.fired = text
        self.on_abort(text, code)


def _ignore_in_python(signum, frame) -> None:  # noqa: ARG001 - the watchdog thread acts on it (wakeup fd)
    """Stop signals are handled by the watchdog thread; the main thread's Python handler does nothing."""


def _first_signal(data: bytes) -> int | None:
    for byte in data:
        if byte in {int(s) for s in STOP_SIGNALS}:
            return byte
    return None
