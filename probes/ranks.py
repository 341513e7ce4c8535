"""The rank recordings of a distributed run opened as one run (mlx-free; ``compare`` and the TUI use it).

A rank recording's meta has a ``distributed`` block (``run_id``, ``rank``, ``world_size``, ``launch_backend``,
``host``, ``device_memory``, ``shard``, ``clock``). ``group_runs`` gathers sessions by ``run_id`` into
``RankRun`` objects (every rank present once, else a one-line ``RankMergeError``) and leaves single-process
sessions as they are. Per run:

- ``imbalance_rows``: per phase (and "all"), every rank's max(active+cache) in that phase, max/min across ranks
  and their ranks, the rank whose phase peak came first (peak times on rank 0's clock, ``probes.rank_clock``),
  and the step skew (for each step every rank recorded, the spread of its aligned end times: residual clock
  error plus per-rank host jitter, since every step ends in an all-reduce);
- ``rank_lanes``: one aligned time series per rank (the TUI's per-rank memory lanes);
- ``step_alignment``: whether every rank ran the same forward pass (kind, batch, tokens) at every step;
- ``outputs_report``: whether the ranks of a run, and the runs, generated the same tokens.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from pool.units import mib
from probes.events import Step
from probes.rank_clock import RankClock
from probes.tables import Column, render_table


class RankMergeError(ValueError):
    """Rank recordings that cannot form one run (a rank missing or twice, world sizes that disagree)."""


@dataclass(frozen=True)
class RankRun:
    """The ranks of one distributed run: ``sessions[k]`` is rank ``k``, ``clocks[k]`` maps its times."""

    run_id: str
    label: str
    world_size: int
    launch_backend: str
    sessions: tuple
    clocks: tuple[RankClock, ...]

    @property
    def backend(self) -> str:
        return str(self.sessions[0].meta.get("backend", "?"))

    def rank_label(self, rank: int) -> str:
        return f"{self.label} r{rank}"


def rank_info(session) -> dict | None:
    """The ``distributed`` meta block of a rank recording, or None for a single-process session."""
    info = session.meta.get("distributed")
    return info if isinstance(info, dict) and "run_id" in info and "rank" in info else None


def group_runs(sessions: list) -> tuple[list[RankRun], list]:
    """(rank runs in first-seen order, single-process sessions); raises ``RankMergeError`` (one line)."""
    by_run: dict[str, list] = {}
    plain = []
    for session in sessions:
        info = rank_info(session)
        if info is None:
            plain.append(session)
        else:
            by_run.setdefault(str(info["run_id"]), []).append(session)
    return [_make_run(run_id, members) for run_id, members in by_run.items()], plain


def _make_run(run_id: str, members: list) -> RankRun:
    infos = [rank_info(s) for s in members]
    sizes = {int(i["world_size"]) for i in infos}
    backend = str(members[0].meta.get("backend", "?"))
    if len(sizes) != 1:
        raise RankMergeError(f"run {run_id} ({backend}): ranks disagree on the world size ({sorted(sizes)})")
    size = sizes.pop()
    ranks = sorted(int(i["rank"]) for i in infos)
    if ranks != list(range(size)):
        found = ", ".join(f"rank{r}" for r in ranks)
        missing = sorted(set(range(size)) - set(ranks))
        what = f"rank {missing[0]} of {size} is missing" if missing else "a rank appears twice"
        raise RankMergeError(f"run {run_id} ({backend}): {what} (found {found}); name every rank's file or their "
                             "directory")
    ordered = tuple(sorted(members, key=lambda s: int(rank_info(s)["rank"])))
    t0 = float(ordered[0].meta.get("t_start", 0.0))
    clocks = (RankClock.identity(), *(RankClock.from_session(s, t0) for s in ordered[1:]))
    return RankRun(run_id=run_id, label=backend, world_size=size,
                   launch_backend=str(infos[0].get("launch_backend", "?")), sessions=ordered, clocks=clocks)


# ---- merged per-phase figures ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImbalanceRow:
    """One phase of one run across its ranks. Footprints are max(active+cache) bytes (None: no sample)."""

    run: str
    phase: str
    footprints: tuple[float | None, ...]
    max_rank: int | None
    min_rank: int | None
    imbalance: float | None          # max / min footprint across ranks
    first_peak_rank: int | None      # the rank whose phase peak came first (rank 0's clock)
    first_peak_t: float | None       # when (seconds since rank 0's start)
    peak_spread_s: float | None      # last rank's peak time minus the first's
    step_skew_max_s: float | None
    step_skew_median_s: float | None
    steps_compared: int


def _windows(session) -> list[tuple[str, float, float]]:
    end = session.duration
    spans = [(p.name, p.start, p.end if p.end is not None else end) for p in session.phases()]
    return spans + [("all", 0.0, end)]


def _phase_windows(run: RankRun) -> list[tuple[str, list[tuple[float, float]]]]:
    """Phases every rank recorded (by position, names checked), each with every rank's own window."""
    per_rank = [_windows(s) for s in run.sessions]
    body = min(len(w) for w in per_rank) - 1
    out = []
    for index in [*range(body), -1]:
        names = {w[index][0] for w in per_rank}
        if len(names) == 1:
            out.append((names.pop(), [(w[index][1], w[index][2]) for w in per_rank]))
    return out


def _step_times(run: RankRun, rank: int, t0: float, t1: float) -> dict[int, float]:
    clock = run.clocks[rank]
    return {e.step: clock.to_reference(e.t) for e in run.sessions[rank].events_between(t0, t1, Step)}


def imbalance_rows(run: RankRun) -> list[ImbalanceRow]:
    """One row per phase (plus "all") of ``run`` (see the module docstring)."""
    rows = []
    for phase, windows in _phase_windows(run):
        peaks = [s.peak("footprint", t0, t1) for s, (t0, t1) in zip(run.sessions, windows)]
        feet = tuple(p.value if p.t is not None else None for p in peaks)
        have = [r for r, f in enumerate(feet) if f is not None]
        hi = max(have, key=lambda r: feet[r], default=None)
        lo = min(have, key=lambda r: feet[r], default=None)
        when = {r: run.clocks[r].to_reference(peaks[r].t) for r in have}
        first = min(when, key=when.get, default=None)
        times = [_step_times(run, r, *windows[r]) for r in range(run.world_size)]
        common = set(times[0]).intersection(*times[1:])
        skews = [max(t[s] for t in times) - min(t[s] for t in times) for s in common]
        rows.append(ImbalanceRow(
            run=run.label, phase=phase, footprints=feet, max_rank=hi, min_rank=lo,
            imbalance=feet[hi] / feet[lo] if hi is not None and feet[lo] else None,
            first_peak_rank=first, first_peak_t=when.get(first),
            peak_spread_s=max(when.values()) - min(when.values()) if when else None,
            step_skew_max_s=max(skews, default=None),
            step_skew_median_s=statistics.median(skews) if skews else None, steps_compared=len(skews)))
    return rows


def rank_lanes(run: RankRun, field: str = "footprint") -> list[list[tuple[float, float]]]:
    """Per rank, ``(seconds since rank 0's start, sample[field])`` on rank 0's clock: the per-rank lanes."""
    lanes = []
    for session, clock in zip(run.sessions, run.clocks):
        window = session.samples.window()
        lanes.append([(t, float(v)) for t, v in zip(clock.to_reference_many(window.t), getattr(window, field))])
    return lanes


def check_imbalance(rows: list[ImbalanceRow], limit: float | None) -> list[str]:
    """Gate failures: every row whose max/min footprint across ranks exceeds ``limit``."""
    if limit is None:
        return []
    return [f"{r.run} [{r.phase}]: rank imbalance {r.imbalance:.3f} > {limit} (rank {r.max_rank} vs rank "
            f"{r.min_rank})" for r in rows if r.imbalance is not None and r.imbalance > limit]


def step_alignment(run: RankRun) -> tuple[int, str | None]:
    """(steps every rank recorded, the first step where ranks planned differently or None): lockstep means the
    same kind of forward pass, batch and token count at every step on every rank."""
    plans = [{e.step: (e.type, e.batch, e.num_tokens) for e in s.events_of(Step)} for s in run.sessions]
    common = sorted(set(plans[0]).intersection(*plans[1:]))
    for step in common:
        if any(p[step] != plans[0][step] for p in plans[1:]):
            rank = next(r for r, p in enumerate(plans) if p[step] != plans[0][step])
            return len(common), (f"{run.label}: step {step} differs between ranks: rank 0 {plans[0][step]}, "
                                 f"rank {rank} {plans[rank][step]} (type, batch, tokens)")
    return len(common), None


# ---- outputs ---------------------------------------------------------------------------------------------------
def _outputs(session) -> dict | None:
    summary = session.summary.summary if session.summary is not None else {}
    outputs = summary.get("outputs")
    return outputs if isinstance(outputs, dict) and "digest" in outputs else None


def first_difference(a: dict | None, b: dict | None) -> str:
    """Where two ``generated`` maps ({req_id: tokens}) part, in words."""
    if a is None or b is None:
        return "token lists not recorded"
    for req in sorted(set(a) | set(b), key=int):
        ta, tb = a.get(req), b.get(req)
        if ta is None or tb is None:
            return f"request {req} only in one run"
        for i, (x, y) in enumerate(zip(ta, tb)):
            if x != y:
                return f"request {req} token {i}: {x} vs {y}"
        if len(ta) != len(tb):
            return f"request {req}: {len(ta)} vs {len(tb)} tokens"
    return "same tokens"


def outputs_report(runs: list[RankRun], plain: list) -> tuple[list[str], list[str], bool]:
    """(lines, rank disagreements, every run identical). Ranks of one run must generate the same tokens (a
    disagreement is a failure); runs are compared with each other by digest."""
    lines, failures = [], []
    entries = []  # (name, outputs)
    for run in runs:
        known = [(rank, o) for rank, o in enumerate(_outputs(s) for s in run.sessions) if o is not None]
        odd = [(rank, o) for rank, o in known if o["digest"] != known[0][1]["digest"]]
        if odd:
            (base_rank, base), (rank, other) = known[0], odd[0]
            failures.append(f"{run.label}: rank {rank} generated other tokens than rank {base_rank} "
                            f"({first_difference(base.get('generated'), other.get('generated'))})")
        plural = "s" if run.world_size > 1 else ""
        entries.append((f"{run.label} ({run.world_size} rank{plural})", known[0][1] if known else None))
    entries += [(str(s.meta.get("label") or s.meta.get("backend", "?")) + " (1 process)", _outputs(s))
                for s in plain]
    known = [(name, o) for name, o in entries if o is not None]
    if not known:
        return ["outputs: not recorded"], failures, True
    reference_name, reference = known[0]
    same = True
    for name, o in known:
        if o["digest"] == reference["digest"]:
            lines.append(f"outputs {name}: {o['digest'][:16]} ({o['requests']} requests, {o['generated_tokens']} "
                         "tokens)")
        else:
            same = False
            lines.append(f"outputs {name}: {o['digest'][:16]} DIFFERS from {reference_name} "
                         f"({first_difference(reference.get('generated'), o.get('generated'))})")
    return lines, failures, same


# ---- text ------------------------------------------------------------------------------------------------------
def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f}"


IMBALANCE_COLUMNS = ("run", "phase", "per-rank max(act+cache) MiB", "max/min", "max r", "min r", "first peak",
                     "peak spread ms", "step skew ms med/max")


def format_imbalance(rows: list[ImbalanceRow]) -> str:
    """A plain-text table, one line per run x phase."""
    body = []
    for r in rows:
        first = "-" if r.first_peak_rank is None else f"r{r.first_peak_rank} @{r.first_peak_t:.2f}s"
        skew = "-" if r.step_skew_max_s is None else f"{_ms(r.step_skew_median_s)}/{_ms(r.step_skew_max_s)}"
        body.append((r.run, r.phase, " / ".join(mib(f) for f in r.footprints),
                     "-" if r.imbalance is None else f"{r.imbalance:.3f}", _fmt_rank(r.max_rank),
                     _fmt_rank(r.min_rank), first, _ms(r.peak_spread_s), skew))
    return render_table([Column(name) for name in IMBALANCE_COLUMNS], body)


def _fmt_rank(rank: int | None) -> str:
    return "-" if rank is None else f"r{rank}"


def describe_run(run: RankRun) -> list[str]:
    """Header lines of a run: launch, hosts, shard map and clock alignment per rank."""
    out = [f"run {run.run_id}: {run.label}, {run.world_size} ranks via mlx.launch ({run.launch_backend})"]
    for rank, (session, clock) in enumerate(zip(run.sessions, run.clocks)):
        info = rank_info(session)
        shard = info.get("shard") or {}
        heads = shard.get("kv_heads", ["?", "?"])
        mem = (info.get("device_memory") or {}).get("bytes")
        error = (session.summary.summary if session.summary is not None else {}).get("error")
        state = (f"DAMAGED FILE (read up to byte {session.damage.offset})" if session.damage is not None
                 else "INCOMPLETE (the rank died without closing its recording)" if not session.complete
                 else f"stopped: {error}" if error else "complete")
        where = ("the reference clock" if rank == 0 else
                 f"clock offset {_ms(clock.offset(0.0))} ms (bound {_ms(clock.bound_s)} ms, residual "
                 f"{_ms(clock.residual_s)} ms over {clock.measurements} syncs)")
        out.append(f"  r{rank} {info.get('host', '?')} pid {info.get('pid', '?')}: KV heads [{heads[0]}, {heads[1]}) "
                   f"of {shard.get('n_kv_heads_total', '?')}, {shard.get('kv_bytes_per_token', '?')} B/token, "
                   f"device memory {mib(mem)} MiB; {where}; {state}")
    return out
