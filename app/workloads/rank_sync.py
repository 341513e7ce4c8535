"""Clock and step alignment of the ranks of one run, through the run's own ``mx.distributed`` group.

One *sync* first drains the ranks (a barrier: ``all_sum`` of one element, evaluated, which also waits for any
decode step still in flight), then times ``rounds`` more barriers, each rank reading its clocks right after each
one, and ends with one ``all_gather`` of every round's ``[monotonic ns, wall ns, barrier ns]`` plus
``[step, tokens, output digest]``: every rank then holds every rank's rows. From them:

- **clock offset**: ``offset_k = mono_0 - mono_k`` at a barrier's exit, the seconds to add to rank ``k``'s
  ``time.monotonic()`` to read rank 0's. Rank ``k`` starts a barrier at ``S_k`` and reads its clock at ``E_k``
  after it returns; no rank returns before the last one started (``E_k >= max S``), and ``E_k - S_k`` is the
  measured barrier time, so every ``E_k`` lies in ``[max S, max S + max_k (E_k - S_k)]``: the offset of a round
  is exact to within ``bound_s = max_k barrier_k`` (scheduling delays included, since they are inside
  ``E_k``). Each sync keeps the round with the smallest bound (NTP's minimum-delay filter).
  ``residual_s = offset_now - offset_start`` is how far the start alignment is off later: the residual skew.
- **step alignment**: every rank must be at the same step with the same token count and the same digest of what
  it generated (all ranks sample from identical logits, since ``all_sum`` hands every rank the same bytes, and
  run the same scheduler on the same prompts). A difference raises ``RankDivergence`` on every rank alike.

When: at the start (``rounds`` rounds), at every phase start, every ``interval_s`` seconds of work, and at the
end. "Every few seconds" is decided identically on every rank: after each sync every rank computes the next
sync's *step number* from rank 0's row (steps per second so far), so no rank ever waits for a sync the others
skip. Costs (time inside syncs) are measured and reported in the summary.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from probes.rank_clock import kept_measurements, residual_of

NS = 1e-9
ROUND = 3  # per round: mono_ns, wall_ns, barrier_ns
TAIL = 3   # per sync: step, tokens, digest


class RankDivergence(RuntimeError):
    """Ranks of one run disagree on step, token count or generated tokens (lockstep broken)."""


def best_round(rows: list[list[int]], rounds: int) -> int:
    """The round whose slowest barrier was fastest (the tightest offset bound)."""
    return min(range(rounds), key=lambda r: max(row[r * ROUND + 2] for row in rows))


def round_offsets(rows: list[list[int]], r: int) -> tuple[list[float], float]:
    """(per-rank offsets in seconds to add to rank k's monotonic clock to read rank 0's, the bound) of round r."""
    base = r * ROUND
    offsets = [(rows[0][base] - row[base]) * NS for row in rows]
    return offsets, max(row[base + 2] for row in rows) * NS


def check_lockstep(rows: list[list[int]], reason: str) -> None:
    """Raise ``RankDivergence`` (one line) unless every rank reports the same step, tokens and output digest."""
    first = rows[0][-TAIL:]
    for rank, row in enumerate(rows[1:], start=1):
        step, tokens, digest = row[-TAIL:]
        if [step, tokens, digest] != first:
            raise RankDivergence(
                f"ranks diverged ({reason} sync): rank 0 at step {first[0]} with {first[1]} tokens "
                f"(outputs {first[2]:x}), rank {rank} at step {step} with {tokens} tokens (outputs {digest:x})")


def measure_offset(rows: list[list[int]], rounds: int, rank: int) -> dict:
    """This rank's offset from one sync's rows: the best round's offset and bound, the spread over rounds, and
    the wall clocks' disagreement beyond the monotonic offset (NTP-level, informative across hosts)."""
    r = best_round(rows, rounds)
    offsets, bound = round_offsets(rows, r)
    every = [round_offsets(rows, i)[0][rank] for i in range(rounds)]
    wall = (rows[0][r * ROUND + 1] - rows[rank][r * ROUND + 1]) * NS - offsets[rank]
    return {"offset_s": offsets[rank], "bound_s": bound, "spread_s": max(every) - min(every), "rounds": rounds,
            "wall_minus_mono_offset_s": wall}


def next_sync_step(step: int, t_ns: int, previous: tuple[int, int] | None, interval_s: float) -> int:
    """The step at which every rank syncs next: ``interval_s`` of work at rank 0's pace since ``previous``
    (``(step, rank 0 monotonic ns)`` of the previous sync)."""
    if previous is None or step <= previous[0] or t_ns <= previous[1]:
        return step + 1
    steps_per_s = (step - previous[0]) / ((t_ns - previous[1]) * NS)
    return step + max(1, int(interval_s * steps_per_s))


class RankSync:
    """Runs the syncs of one rank (see the module docstring). Owns the schedule, the start alignment and the
    running figures; ``beat`` (the watchdog's) is called around every collective."""

    def __init__(self, group, *, interval_s: float = 2.0, rounds: int = 4, start_rounds: int = 16,
                 beat: Callable[[], None] = lambda: None):
        self.group, self.interval_s, self.beat = group, float(interval_s), beat
        self.rounds, self.start_rounds = rounds, start_rounds
        self.rank = group.rank()
        self.clock: dict | None = None
        self.next_step = 1
        self._previous: tuple[int, int] | None = None  # (step, rank 0 monotonic ns) of the last sync
        self._last_step = -1
        self.syncs = 0
        self.cost_s = 0.0    # timed rounds, gather, digest: the syncs' own cost during the run
        self.drain_s = 0.0   # waiting in the drain barrier (in-flight steps, slower peers): mostly waits the next
                             # step would have had anyway, minus the one step's host/device overlap it breaks
        self.start_s = 0.0   # the start alignment, before the run (includes waiting for peers to load)
        self.measurements: list[tuple[float, float, float]] = []  # (monotonic s, offset_s, bound_s), start first

    def _exchange(self, rounds: int, step: int, tokens: int, digest: int) -> list[list[int]]:
        """Drain, ``rounds`` timed barriers, one all_gather; returns every rank's row (rank order)."""
        import mlx.core as mx

        self.beat()
        t0 = time.monotonic_ns()
        one = mx.array([1], dtype=mx.int32)
        mx.eval(mx.distributed.all_sum(one, group=self.group))  # drain: in-flight steps finish on every rank
        t1 = time.monotonic_ns()
        self.drain_s += (t1 - t0) * NS
        mine: list[int] = []
        for _ in range(rounds):
            start = time.monotonic_ns()
            mx.eval(mx.distributed.all_sum(one, group=self.group))
            mono = time.monotonic_ns()
            mine += [mono, time.time_ns(), mono - start]
        mine += [step, tokens, digest]
        gathered = mx.distributed.all_gather(mx.array(mine, dtype=mx.int64), group=self.group)
        rows = gathered.reshape(self.group.size(), len(mine)).tolist()
        self.beat()
        self.syncs += 1
        self.cost_s += (time.monotonic_ns() - t1) * NS
        return rows

    def start(self) -> dict:
        """The start alignment (``start_rounds`` rounds at step 0); stored in ``clock`` and returned."""
        t0 = time.monotonic()
        rows = self._exchange(self.start_rounds, 0, 0, 0)
        self.cost_s = self.drain_s = 0.0
        self.start_s = time.monotonic() - t0
        self.clock = dict(measure_offset(rows, self.start_rounds, self.rank), reference="rank 0 time.monotonic()")
        self.measurements.append((time.monotonic(), self.clock["offset_s"], self.clock["bound_s"]))
        self._previous = (0, rows[0][0])
        return self.clock

    def due(self, step: int) -> bool:
        """True at the step boundary where every rank syncs next (once per step value)."""
        return step >= self.next_step and step != self._last_step

    def sync(self, reason: str, step: int, tokens: int, digest: Callable[[], int]) -> dict:
        """One sync at a point every rank reaches in the same order; returns the ``clock`` event to record.
        ``digest()``: this rank's outputs so far as an int < 2**63. Raises ``RankDivergence`` when the ranks are
        not in lockstep."""
        t0 = time.monotonic()
        mine = digest()
        self.cost_s += time.monotonic() - t0
        rows = self._exchange(self.rounds, step, tokens, mine)
        check_lockstep(rows, reason)
        measured = measure_offset(rows, self.rounds, self.rank)
        residual = measured["offset_s"] - (self.clock or {}).get("offset_s", 0.0)
        self.measurements.append((time.monotonic(), measured["offset_s"], measured["bound_s"]))
        self.next_step = next_sync_step(step, rows[0][0], self._previous, self.interval_s)
        self._previous, self._last_step = (step, rows[0][0]), step
        return {"kind": "clock", "reason": reason, "step": step, "tokens": tokens, "offset_s": measured["offset_s"],
                "bound_s": measured["bound_s"], "residual_s": residual}

    def summary(self) -> dict:
        """Sync count and cost, and the alignment as a reader will use it (``probes.rank_clock``): the good
        measurements' loosest bound and how far their offsets moved (the residual skew)."""
        clock = self.clock or {}
        kept = kept_measurements(self.measurements) if self.measurements else []
        return {"syncs": self.syncs, "sync_cost_s": round(self.cost_s, 6), "sync_drain_s": round(self.drain_s, 6),
                "start_sync_s": round(self.start_s, 6), "interval_s": self.interval_s,
                "start_offset_s": clock.get("offset_s"), "start_bound_s": clock.get("bound_s"),
                "kept_measurements": len(kept), "alignment_bound_s": max((b for _, _, b in kept), default=None),
                "residual_skew_s": residual_of(kept) if kept else None}
