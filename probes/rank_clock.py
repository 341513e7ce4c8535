"""One rank's session time on rank 0's clock (mlx-free): the alignment the rank recorded, made usable.

A rank recording carries its start alignment (``meta["distributed"]["clock"]``: offset to rank 0's monotonic
clock, and the bound that offset is exact within) and one ``ClockSync`` event per later sync (``offset_s``,
``bound_s``, at the event's time). ``RankClock.from_session`` keeps the *good* measurements (bound within
``2 x best + 50 us``: a sync taken while the machine was busy has a loose bound and is left out rather than
averaged in), and maps a time by linear interpolation between them (constant outside), which follows drift
between hosts' clocks. ``bound_s`` is the alignment's uncertainty (the loosest kept bound); ``residual_s`` is
how far the kept offsets moved over the run (what one start-only alignment would get wrong).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from probes.events import ClockSync

KEEP_SLACK_S = 50e-6


def kept_measurements(raw: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """The good ``(t, offset_s, bound_s)`` measurements, time-sorted: bound within ``2 x best + 50 us``."""
    best = min(b for _, _, b in raw)
    return sorted((t, off, b) for t, off, b in raw if b <= 2 * best + KEEP_SLACK_S)


def residual_of(kept: list[tuple[float, float, float]]) -> float:
    """How far the good offsets moved over the run (max - min): the residual skew of a start-only alignment."""
    offsets = [off for _, off, _ in kept]
    return max(offsets) - min(offsets)


@dataclass(frozen=True)
class RankClock:
    """Maps rank-relative session seconds to rank-0-relative seconds: ``t + shift_s + offset(t)``."""

    shift_s: float                                  # this rank's t_start minus rank 0's (each on its own clock)
    anchors: tuple[tuple[float, float], ...]        # (t, offset_s), time-sorted
    bound_s: float
    residual_s: float
    measurements: int

    @classmethod
    def identity(cls) -> "RankClock":
        return cls(0.0, ((0.0, 0.0),), 0.0, 0.0, 1)

    @classmethod
    def from_session(cls, session, reference_t_start: float) -> "RankClock":
        """The clock of ``session`` against rank 0's ``t_start`` (its meta's monotonic start time)."""
        dist = session.meta.get("distributed") or {}
        start = dist.get("clock") or {}
        raw = [(0.0, float(start.get("offset_s", 0.0)), float(start.get("bound_s", 0.0)))]
        raw += [(e.t, e.offset_s, e.bound_s) for e in session.events_of(ClockSync)]
        kept = kept_measurements(raw)
        shift = float(session.meta.get("t_start", 0.0)) - float(reference_t_start)
        return cls(shift_s=shift, anchors=tuple((t, off) for t, off, _ in kept),
                   bound_s=max(b for _, _, b in kept), residual_s=residual_of(kept), measurements=len(raw))

    def offset(self, t: float) -> float:
        """The offset at rank-relative time ``t``: linear between anchors, the nearest one outside them."""
        return self._offset_at([a[0] for a in self.anchors], t)

    def _offset_at(self, times: list[float], t: float) -> float:
        i = bisect.bisect_right(times, t)
        if i == 0:
            return self.anchors[0][1]
        if i == len(self.anchors):
            return self.anchors[-1][1]
        (t0, o0), (t1, o1) = self.anchors[i - 1], self.anchors[i]
        return o0 + (o1 - o0) * (t - t0) / (t1 - t0) if t1 > t0 else o1

    def to_reference(self, t: float) -> float:
        """Rank-relative seconds -> seconds since rank 0's session start, on rank 0's clock."""
        return t + self.shift_s + self.offset(t)

    def to_reference_many(self, ts) -> list[float]:
        """``to_reference`` of every time in ``ts`` (a whole sample column: the anchor times are listed once)."""
        times = [a[0] for a in self.anchors]
        return [t + self.shift_s + self._offset_at(times, t) for t in ts]

    def from_reference(self, t_ref: float) -> float:
        """The inverse: this rank's session time at rank 0's ``t_ref`` (a shared cursor seeking every rank), by
        fixed-point steps; each shrinks the error by the drift rate (microseconds per second between hosts)."""
        t = t_ref - self.shift_s
        for _ in range(8):
            t, previous = t_ref - self.shift_s - self.offset(t), t
            if abs(t - previous) < 1e-12:
                break
        return t
