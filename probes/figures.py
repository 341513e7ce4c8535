"""One definition per figure a user reads, and how each is labelled and printed (mlx-free).

Every surface (the TUI's views, ``compare`` and its ``--json``, ``whatif``, ``report``, ``export``, the Prometheus
metrics) computes these figures by calling the function here, over a *window* ``[t0, t1]`` of a session's own
seconds (None: from the start / to the end; the TUI's "at cursor" is ``[None, cursor]``, a phase is its span, the
whole run is ``[None, None]``), and prints them with the label and format below. ``tests/probes/
test_same_figures.py`` opens one recording and checks that every surface prints the same value for each.

The figures (each function's docstring is the definition):

* ``footprint`` (``peak_footprint``) and ``footprint_ratio``: max(active + cache), and its ratio to the baseline's.
* ``tok/s`` in three kinds (``tok_s``): busy (all tokens over the steps' own time), prefill, decode.
* ``gather runs`` mean/max (``gather_runs``): same-slab runs per sequence per decode step.
* ``declines`` (``declines``): decode-step layer decisions that went to gather instead of the fused kernel.
* ``slabs`` (``slab_count``, ``slab_series``): slabs held over all layers.
* ``probe cost`` (``probe_cost``): the probes' own share of wall time.
* the gate verdict (``gate_verdict``): a footprint ratio against the user's gate ("ok" / "EXCEEDED"), over the
  ``WHOLE_RUN`` (a live run: ``SO_FAR``) as ``compare`` gates it; a ratio up to the cursor is no verdict.
"""

from __future__ import annotations

import bisect
import heapq
import math
import re
import weakref
from dataclasses import dataclass, field

from probes.events import FusedChange, GatherRuns, Step

TOK_S_KINDS = ("busy", "prefill", "decode")
WHOLE_RUN = "whole run"
SO_FAR = "so far"  # a live run's whole run up to now
LABELS = {
    "footprint": "max(act+cache)",
    "footprint_ratio": "footprint vs base",
    "tok_s:busy": "busy tok/s",
    "tok_s:prefill": "prefill tok/s",
    "tok_s:decode": "decode tok/s",
    "tok_s_ratio": "busy tok/s vs base",
    "gather_runs": "gather runs mean/max",
    "declines": "declines",
    "slabs": "slabs (all layers)",
    "probe_cost": "probe cost",
}
# The fused-decode reasons (pool/fused_decision.py, pool/kernels/cuda_builds.py, pool/pool.py) as a fixed set: what
# the metrics label with (a bounded set of label values) and the views count by. Each needle is a regular
# expression searched in the reason; first match wins.
REASON_CLASSES = (
    ("fused", ("^fused ",)),
    ("gather: below threshold", ("below measured break-even",)),
    ("gather: compiling", ("compiling",)),
    ("gather: build failed", ("failed to build",)),
    ("gather: outgrown", ("above the kernel's maximum", "index range", "reads one pool buffer")),
    ("gather: no kernel", ("no GPU kernel backend", "no fused kernel")),
    ("gather: unsupported", ("unsupported by the",)),
    ("gather: disabled", ("disabled by",)),
    ("gather: layer not written", ("not written yet",)),
)
OTHER_REASON = "gather: other"


# ---- memory ----------------------------------------------------------------------------------------------------
def peak_footprint(view, t0: float | None = None, t1: float | None = None) -> float | None:
    """**footprint**: the largest sampled max(active + cache) in the window, in bytes (MLX's own peak counter misses
    the buffer cache, so slabscope samples both, 100 Hz by default). None when no sample fell in the window (never
    0)."""
    peak = view.peak("footprint", t0, t1)
    return peak.value if peak.t is not None else None


def footprint_ratio(peak: float | None, base_peak: float | None) -> float | None:
    """**footprint ratio**: a session's ``peak_footprint`` over its baseline's in the same window (the same phase,
    the whole run, or up to the cursor), the baseline being the dense session when there is one, else the first.
    None when either is missing."""
    return peak / base_peak if peak is not None and base_peak else None


@dataclass(frozen=True)
class GateVerdict:
    """A footprint ratio against the user's gate (``compare --max-ratio``, the TUI's ``--gate``): ``ok`` when
    ``ratio <= gate``."""

    ratio: float
    gate: float

    @property
    def ok(self) -> bool:
        return self.ratio <= self.gate

    @property
    def word(self) -> str:
        return "ok" if self.ok else "EXCEEDED"


def gate_verdict(ratio: float | None, gate: float) -> GateVerdict | None:
    """The verdict on a ``footprint_ratio`` (None when the ratio is unknown)."""
    return None if ratio is None else GateVerdict(ratio, gate)


# ---- throughput ------------------------------------------------------------------------------------------------
def _window(events: list, t0: float | None, t1: float | None) -> list:
    if t0 is None and t1 is None:
        return events
    lo = 0 if t0 is None else _bisect(events, t0, left=True)
    hi = len(events) if t1 is None else _bisect(events, t1, left=False)
    return events[lo:hi]


def _bisect(events: list, t: float, left: bool) -> int:
    find = bisect.bisect_left if left else bisect.bisect_right
    return find(events, t, key=lambda e: e.t)


def tok_s(view, kind: str = "busy", t0: float | None = None, t1: float | None = None) -> float | None:
    """**tok/s** of a kind, over the steps that ended in the window: *busy*: every token computed (prompt and
    generated) over the steps' summed wall time (what ``run``'s summary calls "tok/s busy"; idle time between
    requests does not dilute it); *prefill*: prompt tokens over prefill step time (mlx-lm's "Prompt"); *decode*:
    generated tokens over decode step time (mlx-lm's "Generation"). None without such a step."""
    if kind not in TOK_S_KINDS:
        raise ValueError(f"tok/s kind must be one of {', '.join(TOK_S_KINDS)}, got {kind!r}")
    tokens = seconds = 0.0
    for step in _window(view.events_of(Step), t0, t1):
        if kind != "busy" and step.type != kind:
            continue
        tokens += step.num_tokens or (step.batch if step.type == "decode" else 0)
        seconds += step.wall_s
    return tokens / seconds if seconds > 0 else None


# ---- gather runs -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunsFigure:
    """Same-slab runs per (decode step, sequence): ``hist`` runs -> pairs; ``source`` "measured" (the steps'
    ``GatherRuns`` events) or "op log" (recordings made before those events: derived by replaying the op log; a live
    run always streams the events)."""

    hist: dict[int, int]
    source: str

    @property
    def mean(self) -> float:
        return sum(runs * n for runs, n in self.hist.items()) / sum(self.hist.values())

    @property
    def max(self) -> int:
        return max(self.hist)

    @property
    def pairs(self) -> int:
        return sum(self.hist.values())


_DERIVED_RUNS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _run_points(view, t0: float | None, t1: float | None) -> tuple[list[tuple[float, int, list[int]]], str]:
    """(t, step, runs of each sequence) per decode step in the window, and where they come from."""
    events = view.events_of(GatherRuns)
    if events:
        return [(e.t, e.step, list(e.runs_max)) for e in _window(events, t0, t1)], "measured"
    if not view.is_pool or view.source == "live":  # a live pool run streams GatherRuns (none before its decode)
        return [], ""
    return [(t, -1, runs) for t, runs in _derived_runs(view)
            if (t0 is None or t >= t0) and (t1 is None or t <= t1)], "op log"


def gather_runs(view, t0: float | None = None, t1: float | None = None) -> RunsFigure | None:
    """**gather runs mean/max**: for every decode step in the window and every sequence it advanced, the same-slab
    runs its attention walked (the maximum over layers: what a gather reads, or the block-table runs the fused kernel
    walks); their mean and maximum. Prefill reads are not in it. None without a pool or without a decode step in the
    window."""
    points, source = _run_points(view, t0, t1)
    hist: dict[int, int] = {}
    for _t, _step, runs in points:
        for value in runs:
            hist[value] = hist.get(value, 0) + 1
    return RunsFigure(dict(sorted(hist.items())), source) if hist else None


def worst_runs_per_step(view, t0: float | None = None, t1: float | None = None) -> list[tuple[float, int, int]]:
    """(t, step, the most runs of any of its sequences) per decode step in the window: the steps behind
    ``gather_runs`` (its maximum is the largest of these); ``step`` -1 where the op log was the source."""
    points, _source = _run_points(view, t0, t1)
    return [(t, step, max(runs)) for t, step, runs in points if runs]


def _derived_runs(view) -> list[tuple[float, list[int]]]:
    """(t, runs of each sequence) per decode step, from a replay of the session's op log at its own geometry
    (``probes.whatif.DecodeSteps``); computed once per session. An op log that does not replay is the recording's
    damage: RecordingError (one line), never a guessed figure."""
    if view not in _DERIVED_RUNS:
        from probes.errors import RecordingError, ReplayError
        from probes.whatif import run_whatif

        try:
            _DERIVED_RUNS[view] = [(step.t, step.runs) for step in run_whatif(view).decode_steps]
        except ReplayError as exc:
            raise RecordingError(str(getattr(view, "path", view.label)),
                                 f"gather runs: the op log does not replay ({exc})") from None
    return _DERIVED_RUNS[view]


def format_runs(figure: RunsFigure | None) -> str:
    return "-" if figure is None else f"{figure.mean:.2f}/{figure.max}"


# ---- fused-kernel declines -------------------------------------------------------------------------------------
def reason_class(reason: str) -> str:
    """The fixed class of a fused-decode reason (``REASON_CLASSES``): the reason's text without its numbers."""
    for name, needles in REASON_CLASSES:
        if any(re.search(needle, reason) for needle in needles):
            return name
    return OTHER_REASON


@dataclass(frozen=True)
class Declines:
    """Decode-step layer decisions in a window: ``fused`` and ``gather`` counts, gather ones by reason class."""

    fused: int
    gather: int
    by_class: dict[str, int] = field(default_factory=dict)

    @property
    def decisions(self) -> int:
        return self.fused + self.gather

    @property
    def rate(self) -> float | None:
        return self.gather / self.decisions if self.decisions else None


@dataclass(frozen=True)
class StepDecisions:
    """One decode step's per-layer decisions: how many layers ran fused, how many gathered, and why (by class)."""

    t: float
    fused: int
    gather: int
    by_class: dict[str, int]


def decision_steps(view, t0: float | None = None, t1: float | None = None) -> list[StepDecisions]:
    """The decode steps in the window with their per-layer decisions (each layer's latest ``FusedChange`` up to the
    step; a step's changes are emitted before its ``GatherRuns`` event, so ties go to the changes). Empty for a run
    that made no decision."""
    changes = view.events_of(FusedChange)
    if not changes:
        return []
    state: dict[int, tuple[bool, str]] = {}
    out = []
    for event in heapq.merge(changes, view.events_of(GatherRuns), key=lambda e: e.t):
        if t1 is not None and event.t > t1:
            break
        if isinstance(event, FusedChange):
            state[event.layer] = (event.use_fused, event.reason)
        elif t0 is None or event.t >= t0:
            by_class: dict[str, int] = {}
            for use, reason in state.values():
                if not use:
                    name = reason_class(reason)
                    by_class[name] = by_class.get(name, 0) + 1
            gather = sum(by_class.values())
            out.append(StepDecisions(event.t, len(state) - gather, gather, by_class))
    return out


def declines(view, t0: float | None = None, t1: float | None = None) -> Declines | None:
    """**declines**: of the per-layer fused-kernel decisions of the decode steps in the window (one per layer per
    decode step: the decision in force, ``decision_steps``), those that went to gather; the *decline rate* is
    declines over decisions. None where the window holds no decision: no pool, a pool with no fused-kernel route
    (every layer gathers and nothing was declined), or no decode step in the window. A recording whose worker
    emitted no ``FusedChange`` events but whose pool counted decisions (a pool driven by a script) is counted from
    the pool counters of its snapshot summaries (in force at the window's ends)."""
    if not view.events_of(FusedChange):
        return _counted_declines(view, t0, t1)
    fused = gather = 0
    by_class: dict[str, int] = {}
    for step in decision_steps(view, t0, t1):
        fused, gather = fused + step.fused, gather + step.gather
        for name, count in step.by_class.items():
            by_class[name] = by_class.get(name, 0) + count
    return Declines(fused, gather, dict(sorted(by_class.items()))) if fused + gather else None


def _counted_declines(view, t0: float | None, t1: float | None) -> Declines | None:
    """``declines`` from the pool's decision counters: the summary in force at ``t1`` less the one at ``t0``."""
    end = view.summary_at(view.duration if t1 is None else t1)
    if end is None:
        return None
    start = view.summary_at(t0) if t0 is not None else None
    fused = end.snapshot.counters.fused_decisions - (start.snapshot.counters.fused_decisions if start else 0)
    gather = end.snapshot.counters.gather_decisions - (start.snapshot.counters.gather_decisions if start else 0)
    return Declines(fused, gather) if fused + gather else None


def format_declines(figure: Declines | None) -> str:
    return "-" if figure is None else f"{figure.gather}/{figure.decisions}"


# ---- slabs -----------------------------------------------------------------------------------------------------
def slab_series(view) -> tuple[list[float], list[int]]:
    """(t, slabs) of the session: the memory samples' slab count (100 Hz) where the samples carry it, else the pool
    snapshots' (the sum of every layer's slabs). Empty without a pool."""
    if not view.is_pool:
        return [], []
    window = view.samples.window()
    if any(n is not None for n in window.pool_slabs):
        pairs = [(t, n) for t, n in zip(window.t, window.pool_slabs) if n is not None]
        return [t for t, _ in pairs], [n for _, n in pairs]
    return ([record.t for record in view.snapshots],
            [sum(layer.num_chunks for layer in record.snapshot.layers) for record in view.snapshots])


def slab_count(view, t0: float | None = None, t1: float | None = None) -> int | None:
    """**slabs**: the most slab tensors the pool held at once in the window, over all layers (the monolithic design:
    its 32-block grow chunks), from ``slab_series`` (the value in force at the window's start counts). None without
    a pool or before its first figure."""
    ts, slabs = slab_series(view)
    if not ts:
        return None
    lo = 0 if t0 is None else max(0, bisect.bisect_right(ts, t0) - 1)
    hi = len(ts) if t1 is None else bisect.bisect_right(ts, t1)
    return max(slabs[lo:hi], default=None)


# ---- probes ----------------------------------------------------------------------------------------------------
def probe_cost(view) -> float | None:
    """**probe cost**: the probes' own measure of their cost (sampling and snapshot time) as a fraction of the run's
    wall time: the end summary's figure, else the latest periodic one. None when the session has none."""
    overhead = view.overhead
    return overhead.cost_fraction if overhead is not None else None


# ---- printing --------------------------------------------------------------------------------------------------
def format_bytes_cell(value: float | None) -> str:
    """A footprint in MiB as the tables print it (``pool.units.mib``): ``'5,338.4 MiB'``."""
    from pool.units import mib

    return "-" if value is None else f"{mib(value)} MiB"


def format_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_tok_s(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:,.1f}"


def format_probe_cost(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def format_slabs(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
