"""Compare sessions per phase and gate on the figures (mlx-free).

For every session and every phase (plus a whole-run row "all"): max(active+cache) ("max in window" of the
phase), max RSS, footprint ratio to the baseline session's same phase, throughput (tokens of the phase's step
events / phase wall time) and its ratio, slab count (max over layers and snapshots), fragmentation (max), gather
runs (mean and max, from the pool's run histograms over the phase), the fused-decode decline rate (gather
decisions / all decisions in the phase), K/V bytes gathered by prefill and decode reads (measured, else the model
in parentheses) and the share of prefill decisions that read the history in place. Pool figures are None for sessions without a pool (dense).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from pool.gather_runs import mean_runs
from probes.events import Step


@dataclass
class PhaseRow:
    session: str
    backend: str
    phase: str
    footprint_max: float | None
    rss_max: float | None
    footprint_ratio: float | None
    tokens_per_s: float | None
    throughput_ratio: float | None
    max_slabs: int | None
    max_fragmentation: float | None
    mean_runs: float | None
    max_runs: int | None
    decline_rate: float | None
    # K/V bytes reads copied out of the pool in the phase (pool/gather_meter.py): measured from MLX's allocator
    # (None: the session did not meter, or has no pool) beside the shape-derived model; prefill route share
    prefill_bytes_gathered: int | None = None
    prefill_bytes_gathered_model: int | None = None
    decode_bytes_gathered: int | None = None
    decode_bytes_gathered_model: int | None = None
    prefill_paged_rate: float | None = None


def _label(view, index: int) -> str:
    meta = view.meta
    return str(meta.get("label") or meta.get("backend") or f"session{index}")


def _windows(view) -> list[tuple[str, float, float]]:
    end = view.duration
    spans = [(p.name, p.start, p.end if p.end is not None else end) for p in view.phases()]
    return spans + [("all", 0.0, end)]


def _peak(view, field: str, t0: float, t1: float) -> float | None:
    """Max of a sample field in [t0, t1]; None when no sample fell in the window (a phase shorter than the
    sampling period): shown as "-", never as 0."""
    peak = view.peak(field, t0, t1)
    return peak.value if peak.t is not None else None


def _throughput(view, t0: float, t1: float) -> float | None:
    steps = view.events_between(t0, t1, Step)
    tokens = sum(e.num_tokens for e in steps)
    if not steps or t1 <= t0:
        return None
    return tokens / (t1 - t0)


def _hist_delta(view, t0: float, t1: float) -> Counter:
    """Gather-run histogram (all layers) accumulated between the snapshots bracketing [t0, t1]."""
    def total(record) -> Counter:
        hist: Counter = Counter()
        for layer in record.snapshot.layers if record is not None else []:
            hist.update(layer.gather_runs_hist)
        return hist

    end, start = view.summary_at(t1), view.summary_at(t0)
    delta = total(end)
    delta.subtract(total(start) if start is not end else Counter())
    return +delta


def _counter_delta(view, t0: float, t1: float, key: str) -> int:
    end, start = view.summary_at(t1), view.summary_at(t0)
    value = lambda record: getattr(record.snapshot.counters, key) if record is not None else 0  # noqa: E731
    return value(end) - (value(start) if start is not end else 0)


def _optional_delta(view, t0: float, t1: float, key: str) -> int | None:
    """``_counter_delta`` of a counter that may be unrecorded (None at the phase end: None; None at its start: 0)."""
    end, start = view.summary_at(t1), view.summary_at(t0)
    last = getattr(end.snapshot.counters, key) if end is not None else None
    if last is None:
        return None
    first = getattr(start.snapshot.counters, key) if start is not None and start is not end else None
    return last - (first or 0)


def _gathered_figures(view, t0: float, t1: float) -> dict:
    """Bytes gathered per phase (measured and model) and the share of prefill decisions that read in place."""
    paged = _optional_delta(view, t0, t1, "prefill_paged_decisions") or 0
    gathered = _optional_delta(view, t0, t1, "prefill_gather_decisions") or 0
    figures = {key: _optional_delta(view, t0, t1, key) for key in (
        "prefill_bytes_gathered", "prefill_bytes_gathered_model", "decode_bytes_gathered",
        "decode_bytes_gathered_model")}
    return {**figures, "prefill_paged_rate": paged / (paged + gathered) if paged + gathered else None}


def _pool_figures(view, t0: float, t1: float) -> dict:
    if not view.snapshots:
        return {"max_slabs": None, "max_fragmentation": None, "mean_runs": None, "max_runs": None,
                "decline_rate": None}
    snaps = [s.snapshot for s in view.snapshots if t0 <= s.t <= t1]
    at_end = view.snapshot_at(t1)  # exact state at the phase end (short phases may hold no periodic snapshot)
    if at_end is not None:
        snaps.append(at_end)
    layers = [layer for snap in snaps for layer in snap.layers]
    hist = _hist_delta(view, t0, t1)
    fused = _counter_delta(view, t0, t1, "fused_decisions")
    declined = _counter_delta(view, t0, t1, "gather_decisions")
    return {
        "max_slabs": max((layer.num_chunks for layer in layers), default=0),
        "max_fragmentation": max((layer.fragmentation for layer in layers), default=0.0),
        "mean_runs": mean_runs(hist),
        "max_runs": max(hist, default=None),
        "decline_rate": declined / (fused + declined) if fused + declined else None,
        **_gathered_figures(view, t0, t1),
    }


@dataclass(frozen=True)
class PhaseFigures:
    """One session's figures for one phase (or "all"), before any ratio to a baseline: what ``compare`` keeps of a
    session once it is read, so a folder of recordings is compared one file at a time (``app.commands.compare``)."""

    phase: str
    footprint_max: float | None
    rss_max: float | None
    tokens_per_s: float | None
    pool: dict


def phase_figures(view) -> list[PhaseFigures]:
    """Every phase's figures of ``view`` (the phases in order, then "all")."""
    return [PhaseFigures(name, _peak(view, "footprint", t0, t1), _peak(view, "rss", t0, t1),
                         _throughput(view, t0, t1), _pool_figures(view, t0, t1))
            for name, t0, t1 in _windows(view)]


def rows_from_figures(figures: list[list[PhaseFigures]], labels: list[str], backends: list[str],
                      baseline: int = 0) -> list[PhaseRow]:
    """Rows for every session x phase from ``phase_figures`` of each; ratios against ``figures[baseline]``'s
    same-named phase."""
    base = {f.phase: (f.footprint_max, f.tokens_per_s) for f in figures[baseline]}
    rows = []
    for label, backend, per_phase in zip(labels, backends, figures):
        for f in per_phase:
            base_foot, base_tps = base.get(f.phase, (None, None))
            foot, tps = f.footprint_max, f.tokens_per_s
            rows.append(PhaseRow(
                session=label, backend=backend, phase=f.phase, footprint_max=foot, rss_max=f.rss_max,
                footprint_ratio=foot / base_foot if foot is not None and base_foot else None,
                tokens_per_s=tps, throughput_ratio=tps / base_tps if tps and base_tps else None, **f.pool))
    return rows


def compare_sessions(views: list, baseline: int = 0, labels: list[str] | None = None) -> list[PhaseRow]:
    """Rows for every session x phase; ratios are against ``views[baseline]``'s same-named phase."""
    return rows_from_figures([phase_figures(view) for view in views],
                             [labels[i] if labels else _label(view, i) for i, view in enumerate(views)],
                             [str(view.meta.get("backend", "?")) for view in views], baseline)


@dataclass
class Gates:
    max_ratio: float | None = None
    max_fragmentation: float | None = None
    max_mean_runs: float | None = None
    max_decline_rate: float | None = None


def check_gates(rows: list[PhaseRow], gates: Gates) -> list[str]:
    """Human-readable failures (empty: all gates pass). Each gate applies to every row that has the figure."""
    checks = (("footprint_ratio", gates.max_ratio, "footprint ratio"),
              ("max_fragmentation", gates.max_fragmentation, "fragmentation"),
              ("mean_runs", gates.max_mean_runs, "mean gather runs"),
              ("decline_rate", gates.max_decline_rate, "fused decline rate"))
    failures = []
    for row in rows:
        for attr, limit, what in checks:
            value = getattr(row, attr)
            if limit is not None and value is not None and value > limit:
                failures.append(f"{row.session} [{row.phase}]: {what} {value:.3f} > {limit}")
    return failures


def _fmt_bytes(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f}"


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


COLUMNS = ("session", "phase", "max(act+cache) MiB", "RSS MiB", "x base", "tok/s", "x base", "slabs", "frag",
           "runs mean/max", "decline", "prefill gathered MiB", "decode gathered MiB", "prefill paged")
# a gathered figure in parentheses is the shape-derived model: the session did not meter reads (pool/gather_meter.py)
GATHERED_NOTE = "gathered MiB: measured from MLX's allocator; (in parentheses): shape-derived, reads not metered"


def _fmt_gathered(measured: int | None, model: int | None) -> str:
    if measured is not None:
        return _fmt_bytes(measured)
    return "-" if model is None else f"({_fmt_bytes(model)})"


def format_table(rows: list[PhaseRow]) -> str:
    """A plain-text table (one line per session x phase)."""
    body = []
    for r in rows:
        runs = "-" if r.mean_runs is None else f"{r.mean_runs:.2f}/{r.max_runs}"
        body.append((r.session, r.phase, _fmt_bytes(r.footprint_max), _fmt_bytes(r.rss_max),
                     _fmt(r.footprint_ratio, ".2f"), _fmt(r.tokens_per_s, ",.1f"), _fmt(r.throughput_ratio, ".2f"),
                     _fmt(r.max_slabs, "d"), _fmt(r.max_fragmentation, ".2f"), runs, _fmt(r.decline_rate, ".2f"),
                     _fmt_gathered(r.prefill_bytes_gathered, r.prefill_bytes_gathered_model),
                     _fmt_gathered(r.decode_bytes_gathered, r.decode_bytes_gathered_model),
                     _fmt(r.prefill_paged_rate, ".2f")))
    widths = [max(len(str(x)) for x in col) for col in zip(COLUMNS, *body)]
    lines = ["  ".join(str(c).rjust(w) if i > 1 else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in (COLUMNS, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + [GATHERED_NOTE])


def rows_to_json(rows: list[PhaseRow]) -> list[dict]:
    return [asdict(r) for r in rows]
