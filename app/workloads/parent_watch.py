"""A worker's watch on its parent: when the parent process is gone (SIGKILLed ``slabscope record``, a crashed TUI),
the worker says so and exits within a few seconds instead of running on, holding its memory, forever.

The watch thread polls ``os.getppid()`` (the kernel reparents an orphan, so the parent id changes the moment the
parent dies; no signal or pipe is needed, and it works on Linux and macOS alike). On a change it calls
``on_orphaned(text)`` (the worker records an error event and sets its stop event, so the run ends through the
normal cancel path and the recording gets its END record), then waits ``grace_s`` for the process to finish and
otherwise ends it with ``os._exit`` (a step that does not return, a queue put with nobody reading).
"""

from __future__ import annotations

import os
import threading
from typing import Callable

POLL_S = 0.25        # how often the parent id is read (a syscall; no measurable cost)
GRACE_S = 2.0        # time for the run to stop by itself before the process is ended
ORPHAN_EXIT_CODE = 3


class ParentWatch:
    """Owns one daemon thread; ``stop()`` ends it when the run finished normally."""

    def __init__(self, parent_pid: int, on_orphaned: Callable[[str], None], *, poll_s: float = POLL_S,
                 grace_s: float = GRACE_S) -> None:
        self.parent_pid = parent_pid
        self.on_orphaned = on_orphaned
        self.poll_s, self.grace_s = poll_s, grace_s
        self.orphaned = False
        self.checks = 0  # parent-id reads that found the parent alive (what a test waits on)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slabscope-parent-watch", daemon=True)

    def start(self) -> "ParentWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while os.getppid() == self.parent_pid:
            self.checks += 1
            if self._stopped.wait(self.poll_s):
                return
        self.orphaned = True
        try:
            self.on_orphaned(f"parent process {self.parent_pid} is gone (killed or crashed); the worker stops and "
                             "exits")
        finally:
            if not self._stopped.wait(self.grace_s):
                os._exit(ORPHAN_EXIT_CODE)
