"""Where a run is, for a user waiting on it (mlx-free): stage, phase, request k/N, tokens, and an estimated time
left. One definition, folded from the worker's events, for the TUI's status bar (``SessionModel.progress``) and
the ``run`` and ``record`` commands' progress lines.

Stages, in order: "starting" (nothing heard from the worker yet), "loading model" (``RunStage``: importing MLX,
reading the weights), "rehearsal" (GPU only), then the scenario's phases by name, then "done", "stopped" (asked to
stop: a ``Done`` whose summary says ``cancelled``) or "failed" (a ``WorkerError``). Nothing says done before the
``Done`` event.

The estimate ("ETA ~") is a model, labelled as one: the time the request phases took per finished request so far,
times the requests left, plus the idle seconds the scenario still has to wait. None until a request finished.
"""

from __future__ import annotations

from probes.events import Done, Event, MetaUpdate, PhaseEdge, RequestDone, RunStage, WorkerError

FINAL_STAGES = ("done", "stopped", "failed")


def planned_phases(meta: dict) -> list[dict]:
    """The scenario's phases as the run's metadata lists them (``scenario.phases``; [] when it does not)."""
    scenario = meta.get("scenario")
    phases = scenario.get("phases") if isinstance(scenario, dict) else None
    return [p for p in phases if isinstance(p, dict)] if isinstance(phases, list) else []


def phase_requests(phase: dict) -> int:
    """Requests a phase serves: its ``count`` (a request phase) or ``turns`` (a conversation); idle phases none."""
    key = {"requests": "count", "conversation": "turns"}.get(str(phase.get("kind")))
    value = phase.get(key) if key else 0
    return value if isinstance(value, int) and value > 0 else 0


class RunProgress:
    """Folds one run's events (``fold``); owns nothing but its counters. Times are the events' own ``t`` (absolute
    for a live stream, session-relative in a read model: only differences are used)."""

    def __init__(self) -> None:
        self.stage = "starting"
        self.detail = ""
        self.phases: list[dict] = []
        self.phase_index = -1
        self.requests_done = 0
        self.tokens = 0
        self.last_t: float | None = None
        self._busy_s = 0.0  # seconds spent in finished request phases
        self._phase_start: float | None = None

    @property
    def requests_total(self) -> int | None:
        total = sum(phase_requests(p) for p in self.phases)
        return total or None

    @property
    def finished(self) -> bool:
        return self.stage in FINAL_STAGES

    def advance(self, t: float, tokens: int) -> None:
        """Move the clock and the token count (an event that says nothing else about progress: a sample)."""
        self.last_t = t if self.last_t is None else max(self.last_t, t)
        self.tokens = max(self.tokens, tokens)

    def fold(self, event: Event) -> None:
        """Update from one event (any kind; those that say nothing about progress only move the clock)."""
        self.advance(event.t, event.tokens)
        match event:
            case RunStage(stage=stage, detail=detail) if not self.finished and self.phase_index < 0:
                self.stage, self.detail = stage, detail
            case MetaUpdate(meta=meta) if not self.phases:
                self.phases = planned_phases(meta)
            case PhaseEdge(edge="start", name=name) if not self.finished:
                self.phase_index += 1
                self.stage, self.detail, self._phase_start = name, "", event.t
            case PhaseEdge(edge="end"):
                if self._phase_start is not None and self._current_requests():
                    self._busy_s += event.t - self._phase_start
                self._phase_start = None
            case RequestDone():
                self.requests_done += 1
            case Done(summary=summary):
                cancelled = isinstance(summary, dict) and summary.get("cancelled")
                failed = isinstance(summary, dict) and "error" in summary
                self.stage = "stopped" if cancelled else "failed" if failed else "done"
            case WorkerError():
                self.stage = "failed"

    def _current_requests(self) -> int:
        phase = self.phases[self.phase_index] if 0 <= self.phase_index < len(self.phases) else {}
        return phase_requests(phase)

    def eta_s(self, now: float | None = None) -> float | None:
        """Estimated seconds left (see the module docstring); None when no request finished yet or done."""
        total = self.requests_total
        if self.finished or not total or not self.requests_done or self.last_t is None:
            return None
        now = self.last_t if now is None else now
        busy = self._busy_s + (now - self._phase_start if self._phase_start is not None and
                               self._current_requests() else 0.0)
        left = busy / self.requests_done * max(0, total - self.requests_done)
        return left + self._idle_left(now)

    def _idle_left(self, now: float) -> float:
        left = 0.0
        for index, phase in enumerate(self.phases):
            seconds = phase.get("seconds") if phase.get("kind") == "idle" else 0
            if not isinstance(seconds, (int, float)) or index < self.phase_index:
                continue
            if index == self.phase_index and self._phase_start is not None:
                left += max(0.0, seconds - (now - self._phase_start))
            elif index > self.phase_index:
                left += seconds
        return left

    def short_text(self, now: float | None = None) -> str:
        """The status bar's form: 'loading model…', 'churn 3/10 req · 1,234 tok · ETA ~21 s', 'done'."""
        if self.stage in ("starting", "loading model", "rehearsal") or self.finished:
            return self.stage + ("" if self.finished else "…")
        total = self.requests_total
        eta = self.eta_s(now)
        return (f"{self.stage} {self.requests_done}{f'/{total}' if total else ''} req · {self.tokens:,} tok"
                + (f" · ETA ~{eta:.0f} s" if eta is not None else ""))

    def text(self, now: float | None = None) -> str:
        """One line: 'loading model (smollm2-135m)…', or 'phase churn · requests done 3/10 · 1,234 tokens ·
        ETA ~21 s (estimate)', or 'done · 10/10 requests · 5,678 tokens'."""
        if self.stage in ("starting", "loading model", "rehearsal"):
            return f"{self.stage}" + (f" ({self.detail})" if self.detail else "") + "…"
        total = self.requests_total
        requests = f"{self.requests_done}/{total}" if total else f"{self.requests_done}"
        if self.finished:
            return f"{self.stage} · {requests} requests · {self.tokens:,} tokens"
        where = f"phase {self.stage}"
        if len(self.phases) > 1:
            where += f" {self.phase_index + 1}/{len(self.phases)}"
        eta = self.eta_s(now)
        tail = f" · ETA ~{eta:.0f} s (estimate)" if eta is not None else ""
        return f"{where} · requests done {requests} · {self.tokens:,} tokens{tail}"
