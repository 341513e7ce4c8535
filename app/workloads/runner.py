"""``run_workload``: one backend's run of a scenario in the current process, reported as events.

Event stream (docs/contracts.md section 2; typed records of ``probes.events``): ``MetaUpdate`` first, then
``PhaseEdge`` start/end around each phase, one ``Step`` per forward pass (followed by the backend's
``FusedChange``/``GatherRuns`` of a decode step, and a ``RequestDone`` per request it finished), ``LogLine``s, and the
caller's ``tick(step, tokens)`` at every step
boundary (the probes take pool snapshots there); the summary is *returned* (the worker wraps it in ``Done``). Every
event is stamped with ``t`` (``time.monotonic()``), ``step`` and ``tokens`` (prompt + generated tokens so far).
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import msgspec

from app.workloads.footprint import FootprintTracker
from app.workloads.outputs import outputs_summary
from app.workloads.scenarios import Scenario, load_scenario
from app.workloads.session import WorkloadSession, build_session
from app.workloads.shrink_points import timed_point
from app.workloads.spec import RunSpec
from probes.events import Event, LogLine, MetaUpdate, PhaseEdge, RequestDone, RunStage, Step

Emit = Callable[[Event], None]
Tick = Callable[[int, int], None]


class Cancelled(Exception):
    """The run was stopped through its ``stop`` event."""


def run_workload(spec: RunSpec, emit: Emit, tick: Tick | None = None, stop: threading.Event | None = None, *,
                 loaded=None, attach: Callable | None = None, check_integrity: bool = False,
                 logits_hook=None, kernel_route=None, before_close: Callable[[dict], None] | None = None) -> dict:
    """Run ``spec`` to completion (or until ``stop`` is set) and return the summary dict.

    ``loaded``: a ``LoadedModel`` to reuse (else ``load_model(spec.model, ...)``). ``attach(meta, session)``
    is called once the model and pool exist, before the first phase (the worker starts its probes there).
    ``check_integrity``: run pool/scheduler integrity checks after every step (tests). Mutates nothing outside
    the session it builds; on an exception the session is closed and the exception propagates.
    ``logits_hook(seq_ids, logits)``: every decode step's [B, vocab] logits (parity tests). ``kernel_route``: the
    fused decode kernel and its registration (``app.workloads.fused_attention.KernelRoute``; default the real
    ``pool.kernels`` ones; tests pass a fake kernel). ``before_close(summary)`` runs after the last phase and
    before the session frees the model and pool (the worker stops its probes there, so no sample is taken of a
    half torn-down process).
    """
    if stop is None and hasattr(tick, "is_set"):  # the contract's short form run_workload(spec, emit, stop)
        tick, stop = None, tick
    scenario = load_scenario(spec.scenario, spec.overrides)  # validated before any model loading
    stage = lambda name, detail="": emit(RunStage(t=time.monotonic(), stage=name, detail=detail))  # noqa: E731
    if loaded is None:
        stage("loading model", spec.model)
    session = build_session(spec, scenario, loaded=loaded, logits_hook=logits_hook, kernel_route=kernel_route,
                            on_stage=stage)
    try:
        runner = _Runner(spec, scenario, session, emit, tick or (lambda s, t: None), stop, check_integrity)
        meta = session.meta()
        emit(runner.stamped(MetaUpdate(meta=meta)))
        if attach is not None:
            attach(meta, session)
        summary = runner.run()
        if before_close is not None:
            before_close(summary)
        return summary
    finally:
        session.close()


class _Runner:
    """Drives the phases; owns the counters and the footprint tracker of one run."""

    def __init__(self, spec: RunSpec, scenario: Scenario, session: WorkloadSession, emit: Emit, tick: Tick,
                 stop, check_integrity: bool):
        self.spec, self.scenario, self.session = spec, scenario, session
        self.emit, self.tick, self.stop, self.check = emit, tick, stop, check_integrity
        self.step = 0
        self.tokens = 0
        self.phase_stats: dict[str, dict] = {}
        self.footprint = FootprintTracker()
        self.cancelled = False

    def stamped(self, event: Event) -> Event:
        """``event`` with the time and the run's counters of now."""
        return msgspec.structs.replace(event, t=time.monotonic(), step=self.step, tokens=self.tokens)

    def run(self) -> dict:
        started = time.perf_counter()
        self.footprint.sample()
        try:
            for phase in self.scenario.phases:
                self._run_phase(phase)
        except Cancelled:
            self.cancelled = True
            self.emit(self.stamped(LogLine(text="cancelled")))
        return self._summary(time.perf_counter() - started)

    def _check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Cancelled()

    def _run_phase(self, phase) -> None:
        stats = self.phase_stats.setdefault(phase.name, _new_phase_stats())
        self.emit(self.stamped(PhaseEdge(name=phase.name, edge="start")))
        t0 = time.perf_counter()
        try:
            if phase.kind == "idle":
                self._idle(phase.seconds)
            else:
                self.session.submit_phase(phase)
                while not self.session.scheduler.idle():
                    self._check_stop()
                    self._one_step(phase.name, stats)
        finally:
            stats["wall_s"] += time.perf_counter() - t0
            self.emit(self.stamped(PhaseEdge(name=phase.name, edge="end")))

    def _idle(self, seconds: float) -> None:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            self._check_stop()
            time.sleep(min(0.05, max(0.0, deadline - time.perf_counter())))
            engine = self.session.engine  # leftover compaction and trims finish while idle
            for event in timed_point(engine.backend, engine.shrink_tally, after_decode=False)[0]:
                self.emit(self.stamped(event))
            self.footprint.sample()
            self.tick(self.step, self.tokens)

    def _one_step(self, phase_name: str, stats: dict) -> None:
        result = self.session.engine.step()
        if result is None:
            raise RuntimeError("scheduler has waiting requests but planned nothing (stalled)")
        self.step += 1
        self.tokens += result.num_tokens
        stats[f"{result.kind}_tokens"] += result.num_tokens
        stats[f"{result.kind}_s"] += result.wall_s
        stats[f"{result.kind}_steps"] += 1
        stats["requests_finished"] += len(result.finished)
        self.footprint.sample()
        self.emit(self.stamped(Step(phase=phase_name, type=result.kind, batch=result.batch,
                                    num_tokens=result.num_tokens, wall_s=round(result.wall_s, 6))))
        for event in result.events:  # fused decision changes, the step's gather runs, what its shrink point gave back
            self.emit(self.stamped(event))
        for seq in result.finished:
            self.emit(self.stamped(RequestDone(req_id=seq.request.req_id, seq_id=seq.seq_id,
                                               prompt_tokens=len(seq.request.prompt),
                                               generated_tokens=len(seq.generated), shared_tokens=seq.num_shared,
                                               finish_reason=seq.finish_reason)))
        if self.check:
            self.session.check_integrity()
        self.tick(self.step, self.tokens)

    def _summary(self, wall_s: float) -> dict:
        phases = {name: _finish_phase_stats(s) for name, s in self.phase_stats.items()}
        prefill = sum(s["prefill_tokens"] for s in self.phase_stats.values())
        decode = sum(s["decode_tokens"] for s in self.phase_stats.values())
        busy = sum(s["prefill_s"] + s["decode_s"] for s in self.phase_stats.values())
        return {
            "scenario": self.scenario.name, "backend": self.spec.backend, "model": self.session.loaded.name,
            "cancelled": self.cancelled, "steps": self.step, "wall_s": round(wall_s, 3),
            "prefill_tokens": prefill, "decode_tokens": decode,
            "tok_s": round((prefill + decode) / busy, 1) if busy else 0.0,
            "decode_tok_s": _rate(decode, sum(s["decode_s"] for s in self.phase_stats.values())),
            "requests_finished": len(self.session.scheduler.finished),
            # the load-time rehearsal ran before this run and is outside wall_s and tok_s (rehearsal.py)
            "rehearsal_s": round(self.session.rehearsal.seconds, 3) if self.session.rehearsal else None,
            "phases": phases, "footprint": self.footprint.summary(),
            "outputs": outputs_summary(self.session.scheduler.finished, self.session.scheduler.running),
            **self.session.pool_summary(),
        }


def _new_phase_stats() -> dict:
    return {"prefill_tokens": 0, "decode_tokens": 0, "prefill_s": 0.0, "decode_s": 0.0, "prefill_steps": 0,
            "decode_steps": 0, "requests_finished": 0, "wall_s": 0.0}


def _rate(tokens: int, seconds: float) -> float:
    return round(tokens / seconds, 1) if seconds > 0 else 0.0


def _finish_phase_stats(s: dict) -> dict:
    out = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in s.items()}
    out["prefill_tok_s"] = _rate(s["prefill_tokens"], s["prefill_s"])
    out["decode_tok_s"] = _rate(s["decode_tokens"], s["decode_s"])
    out["tok_s"] = _rate(s["prefill_tokens"] + s["decode_tokens"], s["wall_s"])  # phase throughput, wall clock
    return out
