"""Compare sessions per phase and gate on the figures (mlx-free).

For every session and every phase (plus a whole-run row "all"), the figures ``probes.figures`` defines, over the
phase's span: the footprint (max(active+cache), "max in window" of the phase) and max RSS, the footprint's ratio to
the baseline session's same phase, busy tok/s and its ratio, decode tok/s, slabs held (all layers), fragmentation
(max over layers and snapshots), gather runs mean/max (per sequence per decode step), the fused-kernel declines,
the K/V bytes prefill and decode reads copied out of the pool (measured from MLX's allocator, else the shape-derived
model in parentheses: pool/gather_meter.py) and the share of prefill decisions that read the history in place.
Pool figures are None for sessions without a pool (dense). The baseline's own rows carry no ratio (a session is
not compared with itself, and no ratio gate applies to it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from probes import figures
from probes.tables import Column, render_table
from pool.units import mib


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
    prefill_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None
    declines: int | None = None
    decisions: int | None = None
    is_baseline: bool = False
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


def _windows(view) -> list[tuple[str, float | None, float | None]]:
    end = view.duration
    spans = [(p.name, p.start, p.end if p.end is not None else end) for p in view.phases()]
    return spans + [("all", None, None)]


def _pool_figures(view, t0: float | None, t1: float | None) -> dict:
    """The pool figures of one window (``probes.figures``), None for a session without a pool."""
    runs = figures.gather_runs(view, t0, t1)
    declined = figures.declines(view, t0, t1)
    return {
        "max_slabs": figures.slab_count(view, t0, t1),
        "max_fragmentation": _max_fragmentation(view, t0, t1),
        "mean_runs": runs.mean if runs else None,
        "max_runs": runs.max if runs else None,
        "decline_rate": declined.rate if declined else None,
        "declines": declined.gather if declined else None,
        "decisions": declined.decisions if declined else None,
        **_gathered_figures(view, t0, t1),
    }


GATHERED_KEYS = ("prefill_bytes_gathered", "prefill_bytes_gathered_model", "decode_bytes_gathered",
                 "decode_bytes_gathered_model")


def _optional_delta(view, t0: float | None, t1: float | None, key: str) -> int | None:
    """A pool counter's growth over the window, for a counter older recordings lack (None at the window's end:
    None, not recorded; None at its start: counted from 0)."""
    lo, hi = 0.0 if t0 is None else t0, view.duration if t1 is None else t1
    end, start = view.summary_at(hi), (view.summary_at(lo) if t0 is not None else None)
    last = getattr(end.snapshot.counters, key, None) if end is not None else None
    if last is None:
        return None
    first = getattr(start.snapshot.counters, key, None) if start is not None and start is not end else None
    return last - (first or 0)


def _gathered_figures(view, t0: float | None, t1: float | None) -> dict:
    """Bytes gathered in the window per phase (measured and model) and the share of prefill decisions that read
    the history in place."""
    paged = _optional_delta(view, t0, t1, "prefill_paged_decisions") or 0
    gathered = _optional_delta(view, t0, t1, "prefill_gather_decisions") or 0
    found = {key: _optional_delta(view, t0, t1, key) for key in GATHERED_KEYS}
    return {**found, "prefill_paged_rate": paged / (paged + gathered) if paged + gathered else None}


def _max_fragmentation(view, t0: float | None, t1: float | None) -> float | None:
    """The largest fragmentation index over layers in the window's snapshots and the state in force at its end."""
    if not view.snapshots:
        return None
    lo, hi = 0.0 if t0 is None else t0, view.duration if t1 is None else t1
    snaps = [s.snapshot for s in view.snapshots if lo <= s.t <= hi]
    at_end = view.snapshot_at(hi)  # exact state at the phase end (short phases may hold no periodic snapshot)
    if at_end is not None:
        snaps.append(at_end)
    return max((layer.fragmentation for snap in snaps for layer in snap.layers), default=0.0)


@dataclass(frozen=True)
class PhaseFigures:
    """One session's figures for one phase (or "all"), before any ratio to a baseline: what ``compare`` keeps of a
    session once it is read, so a folder of recordings is compared one file at a time (``app.commands.compare``)."""

    phase: str
    footprint_max: float | None
    rss_max: float | None
    tokens_per_s: float | None
    pool: dict
    prefill_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None


def phase_figures(view) -> list[PhaseFigures]:
    """Every phase's figures of ``view`` (the phases in order, then "all")."""
    out = []
    for name, t0, t1 in _windows(view):
        rss = view.peak("rss", t0, t1)
        out.append(PhaseFigures(name, figures.peak_footprint(view, t0, t1), rss.value if rss.t is not None else None,
                                figures.tok_s(view, "busy", t0, t1),
                                _pool_figures(view, t0, t1) if view.is_pool else dict.fromkeys(POOL_KEYS),
                                figures.tok_s(view, "prefill", t0, t1), figures.tok_s(view, "decode", t0, t1)))
    return out


POOL_KEYS = ("max_slabs", "max_fragmentation", "mean_runs", "max_runs", "decline_rate", "declines", "decisions",
             *GATHERED_KEYS, "prefill_paged_rate")


def rows_from_figures(per_session: list[list[PhaseFigures]], labels: list[str], backends: list[str],
                      baseline: int = 0) -> list[PhaseRow]:
    """Rows for every session x phase from ``phase_figures`` of each; ratios against ``per_session[baseline]``'s
    same-named phase (the baseline's own rows: none)."""
    base = {f.phase: (f.footprint_max, f.tokens_per_s) for f in per_session[baseline]}
    rows = []
    for index, (label, backend, per_phase) in enumerate(zip(labels, backends, per_session)):
        for f in per_phase:
            base_foot, base_tps = base.get(f.phase, (None, None)) if index != baseline else (None, None)
            foot, tps = f.footprint_max, f.tokens_per_s
            rows.append(PhaseRow(
                session=label, backend=backend, phase=f.phase, footprint_max=foot, rss_max=f.rss_max,
                footprint_ratio=figures.footprint_ratio(foot, base_foot), tokens_per_s=tps,
                throughput_ratio=tps / base_tps if tps and base_tps else None, **f.pool,
                prefill_tokens_per_s=f.prefill_tokens_per_s, decode_tokens_per_s=f.decode_tokens_per_s,
                is_baseline=index == baseline))
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
    """Human-readable failures (empty: all gates pass). Each gate applies to every row that has the figure, with
    the verdict the TUI draws (``probes.figures.gate_verdict``: ok at or below the gate)."""
    checks = (("footprint_ratio", gates.max_ratio, "footprint ratio"),
              ("max_fragmentation", gates.max_fragmentation, "fragmentation"),
              ("mean_runs", gates.max_mean_runs, "mean gather runs"),
              ("decline_rate", gates.max_decline_rate, "fused decline rate"))
    failures = []
    for row in rows:
        for attr, limit, what in checks:
            value = getattr(row, attr)
            if limit is not None and value is not None and not figures.gate_verdict(value, limit).ok:
                failures.append(f"{row.session} [{row.phase}]: {what} {value:.3f} > {limit}")
    return failures


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _ratio(row: PhaseRow, value: float | None) -> str:
    return "base" if row.is_baseline else figures.format_ratio(value)


L = figures.LABELS
COLUMNS = (Column("session"), Column("phase"), Column(f"{L['footprint']} MiB", right=True),
           Column("RSS MiB", right=True), Column(L["footprint_ratio"], right=True), Column(L["tok_s:busy"], right=True),
           Column(L["tok_s_ratio"], right=True), Column(L["tok_s:decode"], right=True),
           Column(L["slabs"], right=True), Column("frag", right=True), Column(L["gather_runs"], right=True),
           Column(L["declines"], right=True), Column("prefill gathered MiB", right=True),
           Column("decode gathered MiB", right=True), Column("prefill paged", right=True))
# a gathered figure in parentheses is the shape-derived model: the session did not meter reads (pool/gather_meter.py)
GATHERED_NOTE = "note: gathered MiB: measured from MLX's allocator; (in parentheses): shape-derived, reads not metered"


def _gathered(measured: int | None, model: int | None) -> str:
    if measured is not None:
        return mib(measured)
    return "-" if model is None else f"({mib(model)})"


def table_cells(r: PhaseRow) -> tuple[str, ...]:
    """One row's cells, each figure printed as ``probes.figures`` prints it."""
    runs = "-" if r.mean_runs is None else f"{r.mean_runs:.2f}/{r.max_runs}"
    declines = "-" if r.declines is None else f"{r.declines}/{r.decisions}"
    return (r.session, r.phase, mib(r.footprint_max), mib(r.rss_max), _ratio(r, r.footprint_ratio),
            figures.format_tok_s(r.tokens_per_s), _ratio(r, r.throughput_ratio),
            figures.format_tok_s(r.decode_tokens_per_s), figures.format_slabs(r.max_slabs),
            _fmt(r.max_fragmentation, ".2f"), runs, declines,
            _gathered(r.prefill_bytes_gathered, r.prefill_bytes_gathered_model),
            _gathered(r.decode_bytes_gathered, r.decode_bytes_gathered_model), _fmt(r.prefill_paged_rate, ".2f"))


def format_table(rows: list[PhaseRow], markdown: bool = False) -> str:
    """The table (one line per session x phase), for a terminal or (``markdown``) a Markdown document."""
    table = render_table(COLUMNS, [table_cells(r) for r in rows], markdown=markdown)
    return table + ("\n\n" if markdown else "\n") + GATHERED_NOTE


def rows_to_json(rows: list[PhaseRow]) -> list[dict]:
    return [asdict(r) for r in rows]
