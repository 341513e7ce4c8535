"""One recording reduced to what the folder commands need of it (``compare``, ``report``; mlx-free).

A folder of recordings used to be opened whole (every session's file image, samples, events and snapshots in
memory at once: 2,000 small recordings took 1.2 GB for ``compare`` and more than 300 s for ``report``). The commands
now read one file at a time into a ``SessionDigest`` (its per-phase compare figures and, for the report, the few
series its plots draw) and let the session go before the next file is opened.
"""

from __future__ import annotations

import os
from array import array
from collections import Counter
from dataclasses import dataclass, field

from probes import figures
from probes.compare import PhaseFigures, phase_figures

META_KEYS = ("label", "backend", "scenario", "model", "device", "mlx_version", "mlx_lm_version",
             "slabscope_version", "commit", "pool")
SERIES_POINTS = 2000  # a timeline kept longer than this is bucketed, each bucket's highest sample kept (peaks stay)


@dataclass
class Series:
    """A session's memory timeline for the report (bytes), at most SERIES_POINTS samples, and its peak."""

    t: array
    footprint: array
    rss: array
    peak: tuple[float, float, str] | None  # (t, bytes, label) of the footprint's peak, None without samples


@dataclass
class SessionDigest:
    """What compare and report keep of one session (module docstring)."""

    path: str
    meta: dict
    phases: list[PhaseFigures]
    complete: bool
    damage: str | None
    duration: float
    probe_cost: float | None        # ProbeOverhead.cost_fraction, None when not recorded
    distributed: bool
    series: Series | None = None    # report only
    phase_spans: list[tuple[str, float, float]] = field(default_factory=list)
    slabs: tuple[list[float], list[int], str] | None = None  # (t, slabs held over all layers, design): pool sessions
    gather_hist: Counter = field(default_factory=Counter)    # runs -> (decode step, sequence) pairs, whole run

    @property
    def label(self) -> str:
        return str(self.meta.get("label") or self.meta.get("backend") or os.path.basename(self.path))


def digest(view, *, series: bool = False) -> SessionDigest:
    """``view`` reduced to its digest (``series``: also what the report's plots draw)."""
    meta = {key: view.meta.get(key) for key in META_KEYS if view.meta.get(key) is not None}
    out = SessionDigest(str(view.path), meta, phase_figures(view), view.complete,
                        str(view.damage) if view.damage is not None else None, view.duration,
                        figures.probe_cost(view), bool(view.meta.get("distributed")))
    if series:
        _add_series(out, view)
    return out


def _add_series(out: SessionDigest, view) -> None:
    window = view.samples.window()
    t, footprint, rss = _bucketed(list(window.t), list(window.footprint), list(window.rss))
    peak = view.peak("footprint")
    out.series = Series(t, footprint, rss, (peak.t, peak.value, peak.label) if peak.t is not None else None)
    out.phase_spans = [(p.name, p.start, p.end if p.end is not None else view.duration) for p in view.phases()]
    ts, slabs = figures.slab_series(view)
    if ts:
        design = view.geometry.design if view.geometry is not None else "slab"
        out.slabs = (*_stepped(ts, slabs), design)
    runs = figures.gather_runs(view)
    if runs is not None:
        out.gather_hist.update(runs.hist)


def _stepped(ts: list[float], values: list[int]) -> tuple[list[float], list[int]]:
    """A step series kept at its changes (and its last point): 100 Hz samples of a slab count that changes a few
    times a run cost the report nothing."""
    keep = [i for i in range(len(ts)) if i == 0 or i == len(ts) - 1 or values[i] != values[i - 1]]
    return [ts[i] for i in keep], [values[i] for i in keep]


def _bucketed(t: list, footprint: list, rss: list) -> tuple[array, array, array]:
    """At most SERIES_POINTS samples: consecutive buckets, each kept as its highest-footprint sample."""
    if len(t) <= SERIES_POINTS:
        return array("d", t), array("d", footprint), array("d", rss)
    keep = []
    size = len(t) / SERIES_POINTS
    for bucket in range(SERIES_POINTS):
        lo, hi = int(bucket * size), int((bucket + 1) * size)
        keep.append(max(range(lo, max(hi, lo + 1)), key=footprint.__getitem__))
    return (array("d", (t[i] for i in keep)), array("d", (footprint[i] for i in keep)),
            array("d", (rss[i] for i in keep)))
