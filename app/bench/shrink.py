"""``slabscope bench shrink``: what giving slabs back buys (footprint after a burst) and what it costs (decode
throughput), per shrink policy (pool/shrink_types.py).

Footprint (``recovery``): the scenario (default ``burst_then_idle``) on one pool backend, once per policy per
round, rounds interleaved (the policy order rotates), every run in a fresh worker process recorded by the probes
(MLX's counters are per process). From the recording: the burst phase's end, and after it every memory sample's
ratio ``footprint / (weights + pool_live)`` (footprint = MLX active + cache, the sampler's figure; weights and
live KV from the same sample). Per run: the worst ratio in the first ``within`` seconds after the burst's end, the
worst from then to the end of the run (the target: at most ``target``), the first time the ratio is at or below
the target and the time from which it stays there, and what the shrink points did (``Shrunk`` events: blocks
moved, bytes moved as measured by the copy meter, the moves' wall time, slabs and bytes released, MLX cache
trimmed, footprint reclaimed) plus the summary's tally of every shrink point's wall time.

Throughput (``cost``): ``churn`` (by default) in one process (model loaded once, a warm-up run per policy), then
interleaved rounds of policy off and the chosen policy: decode tok/s (decode tokens / decode wall time; a shrink
point's time counts in the step it follows, app/workloads/engine.py) and, measured inside each run, the shrink
points' share of the decode wall time. Fresh-process runs beside them. Per figure: median and range; a verdict
names no winner when ranges overlap (the machine is shared).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
from dataclasses import dataclass, field

from app.bench.progress import as_clock

POLICIES = ("off", "release", "compact")
MIN_RUNS_FOR_VERDICT = 5  # app/bench/throughput.py's rule: fewer runs per side name no winner


@dataclass
class ShrinkBenchConfig:
    """Everything a bench run depends on (picklable)."""

    scenario: str = "burst_then_idle"
    overrides: dict = field(default_factory=dict)
    backend: str = "slab"
    model: str = "smollm2-135m"
    dtype: str | None = None
    device: str | None = None
    policies: tuple = POLICIES
    rounds: int = 5
    shrink_budget: int | None = None
    target: float = 1.10
    within_s: float = 2.0
    sample_hz: float = 20.0
    throughput_scenario: str = "churn"
    throughput_overrides: dict = field(default_factory=dict)
    throughput_policy: str = "compact"
    fresh_rounds: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        bad = [p for p in self.policies if p not in POLICIES]
        if bad or not self.policies:
            raise ValueError(f"unknown shrink polic(ies) {bad or self.policies}; choose from {', '.join(POLICIES)}")
        if self.throughput_policy not in POLICIES or self.throughput_policy == "off":
            raise ValueError("the throughput policy must be release or compact (it is compared with off)")
        if self.rounds < 1 or self.fresh_rounds < 0 or not self.target > 0 or self.within_s < 0:
            raise ValueError("rounds >= 1, fresh_rounds >= 0, target > 0 and within >= 0 are required")


def _spec(config: ShrinkBenchConfig, policy: str, *, scenario: str, overrides: dict, record_path=None):
    from app.workloads.spec import RunSpec

    return RunSpec(scenario=scenario, backend=config.backend, model=config.model, dtype=config.dtype,
                   device=config.device, overrides=dict(overrides), seed=config.seed, shrink=policy,
                   shrink_budget=config.shrink_budget, sample_hz=config.sample_hz, record_path=record_path)


# ---- footprint after the burst -------------------------------------------------------------------------------------
def recovery_run(config: ShrinkBenchConfig, policy: str, directory: str) -> dict:
    """One fresh worker process on the scenario, recorded; its recovery figures (``recovery_figures``)."""
    from app.workloads.worker import WorkerHandle
    from probes.replay import Session

    path = os.path.join(directory, f"{policy}-{time.time_ns()}.slabrec")
    handle = WorkerHandle(_spec(config, policy, scenario=config.scenario, overrides=config.overrides,
                                record_path=path)).start()
    handle.join(3600.0)
    if handle.error or not handle.done:
        raise RuntimeError(f"{policy} run failed: {handle.error or 'no result'} (log: {handle.log_path})")
    figures = recovery_figures(Session.open(path), config.target, config.within_s)
    figures["wall_s"] = handle.summary.get("wall_s")
    figures["shrink_points_s"] = (handle.summary.get("shrink") or {}).get("seconds")
    os.unlink(path)
    return figures


def recovery_figures(session, target: float, within_s: float, burst: str = "burst") -> dict:
    """Footprint / (weights + live KV) after the end of phase ``burst`` in a recorded session, and what the shrink
    points did (see the module docstring)."""
    from probes.events import Shrunk

    end = next((p.end for p in session.phases() if p.name == burst and p.end is not None), None)
    if end is None:
        raise ValueError(f"the session has no finished phase {burst!r}")
    w = session.samples.window()
    ratios = [(t, fp / (wt + live)) for t, fp, wt, live in zip(w.t, w.footprint, w.weights, w.pool_live)
              if wt + live > 0]
    after = [(t - end, r) for t, r in ratios if t > end]
    early = [r for dt, r in after if dt < within_s]
    late = [r for dt, r in after if dt >= within_s]
    first_below = next((dt for dt, r in after if r <= target), None)
    stays_from = None
    for dt, r in reversed(after):  # the earliest time after which every sample is at or below the target
        if r > target:
            break
        stays_from = dt
    events = session.events_of(Shrunk)  # the whole run's (before the burst's end too: growth and churn)
    reports = [e.report for e in events]
    return {
        "max_ratio_within": max(early) if early else None,
        "max_ratio_after_within": max(late) if late else None,
        "first_at_or_below_target_s": first_below,
        "stays_at_or_below_target_from_s": stays_from,
        "samples_after": len(after),
        "shrink_events": len(events),
        "blocks_moved": sum(r.blocks_moved for r in reports),
        "bytes_moved": sum(r.bytes_moved for r in reports),
        "bytes_moved_model": sum(r.bytes_moved_model for r in reports),
        "move_s": sum(r.move_s for r in reports),
        "slabs_released": sum(r.slabs_released for r in reports),
        "bytes_released": sum(r.bytes_released for r in reports),
        "trimmed_bytes": sum(r.trimmed_bytes for r in reports),
        "trim_s": sum(r.trim_s for r in reports),
        "reclaimed_bytes": sum(r.reclaimed for r in reports),
    }


def recovery_rounds(config: ShrinkBenchConfig, progress=None) -> dict:
    """{policy: [figures per round]}: rounds interleaved, the policy order rotating, each run a fresh process."""
    clock = as_clock(progress, config.rounds * len(config.policies))
    out: dict = {policy: [] for policy in config.policies}
    order = list(config.policies)
    with tempfile.TemporaryDirectory(prefix="slabscope-bench-shrink-") as directory:
        for index in range(config.rounds):
            shift = index % len(order)
            for policy in order[shift:] + order[:shift]:
                label = f"recovery round {index + 1} {policy}"
                clock.start(f"{label}: a fresh process")
                out[policy].append(recovery_run(config, policy, directory))
                clock.done(label, _recovery_line(out[policy][-1], config))
    return out


def _recovery_line(f: dict, config: ShrinkBenchConfig) -> str:
    def num(value, fmt):
        return "-" if value is None else format(value, fmt)

    return (f"worst ratio in the first {config.within_s:g} s {num(f['max_ratio_within'], '.3f')}, from then on "
            f"{num(f['max_ratio_after_within'], '.3f')}, stays <= {config.target:g} from "
            f"{num(f['stays_at_or_below_target_from_s'], '.2f')} s; moved {f['blocks_moved']} blocks "
            f"{f['bytes_moved'] / 2**20:.2f} MiB in {f['move_s'] * 1e3:.1f} ms; released {f['slabs_released']} slabs "
            f"{f['bytes_released'] / 2**20:.1f} MiB; trimmed {f['trimmed_bytes'] / 2**20:.1f} MiB")


# ---- decode throughput -----------------------------------------------------------------------------------------
def throughput_run(config: ShrinkBenchConfig, policy: str, loaded) -> dict:
    """One in-process run of the throughput scenario: decode tok/s and the shrink points' share of decode time."""
    from app.workloads.runner import run_workload

    summary = run_workload(_spec(config, policy, scenario=config.throughput_scenario,
                                 overrides=config.throughput_overrides), lambda event: None, loaded=loaded)
    decode_s = sum(p["decode_s"] for p in summary["phases"].values())
    shrink = summary.get("shrink") or {}
    return {"decode_tok_s": summary["decode_tok_s"], "decode_s": decode_s,
            "shrink_share_of_decode": shrink.get("decode_seconds", 0.0) / decode_s if decode_s else None,
            "shrink_points": shrink.get("points"), "shrink_points_s": shrink.get("seconds"),
            "blocks_moved": shrink.get("blocks_moved"), "bytes_moved": shrink.get("bytes_moved"),
            "move_s": shrink.get("move_s"), "slabs_released": shrink.get("slabs_released")}


def throughput_rounds(config: ShrinkBenchConfig, progress=None) -> tuple[dict, dict]:
    """(warm-up {policy: figures}, {policy: [figures per round]}) in this process, off vs the chosen policy."""
    from app.models import load_model

    policies = ["off", config.throughput_policy]
    clock = as_clock(progress, len(policies) * (1 + config.rounds))
    clock.note(f"loading model {config.model}…")
    loaded = load_model(config.model, dtype=config.dtype, device=config.device, seed=config.seed)
    warmup = {}
    for policy in policies:
        clock.start(f"throughput warm-up {policy}")
        warmup[policy] = throughput_run(config, policy, loaded)
        clock.done(f"throughput warm-up {policy}", _throughput_line(warmup[policy]))
    rounds: dict = {policy: [] for policy in policies}
    for index in range(config.rounds):
        for policy in policies if index % 2 == 0 else policies[::-1]:
            clock.start(f"throughput round {index + 1} {policy}")
            rounds[policy].append(throughput_run(config, policy, loaded))
            clock.done(f"throughput round {index + 1} {policy}", _throughput_line(rounds[policy][-1]))
    return warmup, rounds


def _throughput_line(f: dict) -> str:
    share = f["shrink_share_of_decode"]
    return (f"decode {f['decode_tok_s']:.1f} tok/s, shrink points {0 if share is None else share * 100:.3f}% of "
            f"decode time, {f['blocks_moved']} blocks moved in {(f['move_s'] or 0) * 1e3:.1f} ms")


def _fresh_child(config: ShrinkBenchConfig, policy: str, queue) -> None:
    try:
        from app.models import load_model
        from app.models.blas import enable_openblas

        enable_openblas()
        loaded = load_model(config.model, dtype=config.dtype, device=config.device, seed=config.seed)
        queue.put({"ok": throughput_run(config, policy, loaded)})
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def fresh_throughput(config: ShrinkBenchConfig, progress=None, timeout_s: float = 1800.0) -> dict:
    """{policy: [figures per fresh process]}, off and the chosen policy alternating."""
    ctx = mp.get_context("spawn")
    out: dict = {policy: [] for policy in ("off", config.throughput_policy)}
    clock = as_clock(progress, len(out) * config.fresh_rounds)
    for index in range(config.fresh_rounds):
        for policy in out:
            queue = ctx.Queue()
            child = ctx.Process(target=_fresh_child, args=(config, policy, queue), daemon=True)
            clock.start(f"fresh {index + 1} {policy}: a new process loads the model and runs")
            child.start()
            result = queue.get(timeout=timeout_s)
            child.join(10)
            if "error" in result:
                raise RuntimeError(f"fresh {policy} run failed: {result['error']}")
            out[policy].append(result["ok"])
            clock.done(f"fresh {index + 1} {policy}", _throughput_line(result["ok"]))
    return out


# ---- statistics (median and range per figure: app.bench.throughput.summarize) ----------------------------------
def throughput_verdict(off: dict, on: dict, policy: str) -> str:
    """Decode tok/s of ``policy`` against off: the medians' ratio, and a winner only when the ranges do not
    overlap."""
    a, b = on.get("decode_tok_s"), off.get("decode_tok_s")
    if not a or not b:
        return "no decode figures"
    ratio = a["median"] / b["median"]
    runs = min(a["n"], b["n"])
    if runs < MIN_RUNS_FOR_VERDICT:
        verdict = f"only {runs} run(s) each, fewer than {MIN_RUNS_FOR_VERDICT}: no winner"
    elif a["min"] <= b["max"] and b["min"] <= a["max"]:
        verdict = "ranges overlap: no winner"
    else:
        verdict = f"ranges do not overlap: {policy if ratio > 1 else 'off'} is faster"
    return f"decode tok/s {policy} / off = {ratio:.4f} (medians), {verdict}"
