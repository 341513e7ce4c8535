"""Shrink points of a run: where the pool gives memory back (pool/shrink_types.py), and the run's tally of them.

The engine asks for one after every step (its time counts in that step's wall time) and the runner for one at every
idle tick. On a pool backend, ``run_shrink_point`` calls ``PagedKVPool.shrink`` (logged as a ``shrink`` op whatever
the policy, so a what-if can run another policy at the same points) and, when memory was given back, returns a
``Shrunk`` event with the pool's report (MLX's active + cache around it included). ``ShrinkTally`` sums the run's
points for the summary: how many, their wall time (all of them, the no-op ones included: that is what the policy
costs a step), and what the ones that did something moved, released, trimmed and reclaimed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from probes.events import Shrunk


@dataclass
class ShrinkTally:
    """Owns the run's shrink figures (bytes, seconds); ``add`` folds one point in."""

    points: int = 0
    seconds: float = 0.0          # wall time of every shrink point
    decode_seconds: float = 0.0   # of the points that followed a decode step
    events: int = 0               # points that gave memory back
    blocks_moved: int = 0
    bytes_moved: int = 0          # measured (pool/copy_meter.py)
    bytes_moved_model: int = 0
    slabs_released: int = 0
    bytes_released: int = 0
    trimmed_bytes: int = 0
    reclaimed_bytes: int = 0      # MLX active + cache before minus after, summed
    move_s: float = 0.0
    release_s: float = 0.0
    trim_s: float = 0.0

    def add(self, seconds: float, after_decode: bool, events: list) -> None:
        """One shrink point: its wall time and the ``Shrunk`` events it returned."""
        self.points += 1
        self.seconds += seconds
        if after_decode:
            self.decode_seconds += seconds
        self.add_events(events)

    def add_events(self, events: list) -> None:
        """Fold ``Shrunk`` events in (what the points that gave memory back did)."""
        for event in events:
            report = event.report
            self.events += 1
            self.blocks_moved += report.blocks_moved
            self.bytes_moved += report.bytes_moved
            self.bytes_moved_model += report.bytes_moved_model
            self.slabs_released += report.slabs_released
            self.bytes_released += report.bytes_released
            self.trimmed_bytes += report.trimmed_bytes
            self.reclaimed_bytes += report.reclaimed
            self.move_s += report.move_s
            self.release_s += report.release_s
            self.trim_s += report.trim_s

    def summary(self, policy: str) -> dict:
        return {"policy": policy, **{k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}}


def run_shrink_point(pool) -> list:
    """One shrink point on ``pool``; a ``Shrunk`` event (what the pool did and measured) when it gave memory back."""
    report = pool.shrink()
    return [Shrunk(report=report)] if report.did_something else []


def timed_point(backend, tally: ShrinkTally, after_decode: bool) -> tuple[list, float]:
    """Run ``backend``'s shrink point, fold it into ``tally``; returns (events, seconds)."""
    t0 = time.perf_counter()
    events = backend.shrink_point()
    seconds = time.perf_counter() - t0
    tally.add(seconds, after_decode, events)
    return events, seconds
