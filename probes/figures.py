"""The figures a user reads, one definition each (mlx-free).

Every surface that shows one of these figures (the TUI, ``compare``, ``whatif``, ``report``, exports, metrics)
calls the function here and labels it with the constant here, so one name never means two numbers. A function
takes a session read model (``probes.store.SessionModel``: a live run or a recording) and a time window in the
session's own seconds: ``t0``/``t1`` None mean the session's start/end ("whole run"; for a live run: so far).

Figures defined so far:

* ``footprint_peak``: the footprint, max(MLX active + MLX cache) over the memory samples.
* ``footprint_ratio``: one session's footprint over its baseline's (dense), each over its own window.
* ``tokens_per_s`` (``TOK_S_KIND``): tokens of the forward passes in a window over the window's wall time.
* ``decode_tokens_per_s`` (``DECODE_TOK_S_KIND``): decode tokens over the decode steps' own time.
* ``gate_verdict``: a ratio against the user's gate ("ok" / "EXCEEDED").
"""

from __future__ import annotations

from dataclasses import dataclass

from probes.events import Step

FOOTPRINT_LABEL = "max(act+cache)"
TOK_S_KIND = "prefill+decode tokens / wall s"
DECODE_TOK_S_KIND = "decode tokens / decode-step s"
WHOLE_RUN = "whole run"
SO_FAR = "so far"


def footprint_peak(model, t0: float | None = None, t1: float | None = None) -> float | None:
    """The footprint over ``[t0, t1]``: the largest ``active + cache`` (bytes) among the memory samples in the
    window. MLX's peak counter is not used: it counts active memory only and misses the buffers MLX keeps in its
    cache, which the process holds all the same. Sampled (``--sample-hz``): a peak shorter than the sampling
    period can fall between two samples. None when no sample fell in the window (never a made-up 0)."""
    peak = model.peak("footprint", t0, t1) if t0 is not None or t1 is not None else model.peak("footprint")
    return peak.value if peak.t is not None else None


def ratio(value: float | None, base: float | None) -> float | None:
    """``value / base``; None when either is unknown or the base is not positive."""
    if value is None or base is None or base <= 0:
        return None
    return value / base


def footprint_ratio(model, baseline, until: float | None = None, baseline_until: float | None = None) -> float | None:
    """Footprint ratio: ``footprint_peak(model)`` over ``footprint_peak(baseline)``, each from its start up to
    ``until`` / ``baseline_until`` in its own seconds (None: its whole run). The baseline is the dense session of
    the same scenario (``compare``: ``--baseline``). Below 1: the session held less memory at its peak."""
    return ratio(footprint_peak(model, None if until is None else 0.0, until),
                 footprint_peak(baseline, None if baseline_until is None else 0.0, baseline_until))


def tokens_per_s(model, t0: float | None = None, t1: float | None = None) -> float | None:
    """Throughput (``TOK_S_KIND``): the tokens of every forward pass (prefill chunks and decode steps, the ``Step``
    events) stamped in ``[t0, t1]`` divided by the window's wall seconds, idle time included; a window reaching past
    the session's end ends there. None before the first forward pass or for an empty window."""
    lo = 0.0 if t0 is None else t0
    hi = model.duration if t1 is None else min(t1, model.duration)
    steps = model.events_between(lo, hi, Step)
    if not steps or hi <= lo:
        return None
    return sum(step.num_tokens for step in steps) / (hi - lo)


def decode_tokens_per_s(model, until: float | None = None) -> float | None:
    """Decode throughput (``DECODE_TOK_S_KIND``): the tokens of the decode steps up to ``until`` over those steps'
    own wall time (prefill and idle time left out). None before the first decode step."""
    return model.decode_tok_s(until)


@dataclass(frozen=True)
class GateVerdict:
    """A footprint ratio against the user's gate: ``ok`` when ``ratio <= gate``."""

    ratio: float
    gate: float

    @property
    def ok(self) -> bool:
        return self.ratio <= self.gate

    @property
    def word(self) -> str:
        return "ok" if self.ok else "EXCEEDED"


def gate_verdict(value: float | None, gate: float) -> GateVerdict | None:
    """The verdict on a ratio (None when the ratio is unknown)."""
    return None if value is None else GateVerdict(value, gate)
