"""Progress of a bench for a user waiting on it: what it loads, then ``[k/N] label…`` before each run and
``[k/N] label: figures (S s so far, ETA ~T s)`` after it. The estimate is a model, labelled as one: the mean time
per run so far times the runs left.

``RunClock(total, say)`` wraps the ``progress`` callable every bench takes (``say(text)``: a line on stderr);
``as_clock`` lets a function accept either (a bench's parts keep their plain ``progress`` argument).
"""

from __future__ import annotations

import time
from typing import Callable


class RunClock:
    """Counts ``total`` runs and says where the bench is. Owns its counters only."""

    def __init__(self, total: int, say: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.say, self.clock = max(1, total), say or (lambda text: None), clock
        self.done_runs = 0
        self.started = clock()

    def note(self, text: str) -> None:
        """A line that is not a run (loading a model, spawning a process)."""
        self.say(text)

    def start(self, label: str) -> None:
        self.say(f"[{min(self.done_runs + 1, self.total)}/{self.total}] {label}…")

    def done(self, label: str, figures: str) -> None:
        self.done_runs += 1
        elapsed = self.clock() - self.started
        left = self.total - self.done_runs
        eta = f", ETA ~{elapsed / self.done_runs * left:.0f} s (estimate)" if left > 0 else ""
        self.say(f"[{self.done_runs}/{self.total}] {label}: {figures} ({elapsed:.0f} s so far{eta})")


def as_clock(progress, total: int) -> RunClock:
    """``progress`` itself when it is a ``RunClock`` (one clock over a whole bench), else a clock of ``total``
    runs saying through ``progress`` (a callable or None)."""
    return progress if isinstance(progress, RunClock) else RunClock(total, progress)
