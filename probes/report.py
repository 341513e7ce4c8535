"""Markdown report with PNG plots for one or more sessions (matplotlib, Agg backend; no mlx).

Plots: memory timeline (max(active+cache) and RSS per backend, phases shaded, "max since start" peak marked),
accounting stack per session (weights / pool live / pool reserved-free / other MLX active / MLX cache, with the
RSS remainder drawn as its own line: never hidden), slabs held over time (all layers, from the 100 Hz samples where
they carry it) and the gather-run histogram (per sequence per decode step, whole run). Tables (Markdown, rendered
by ``probes.tables``): the compare table and each session's metadata and probe cost. Every figure is the one
``probes.figures`` defines, under its label there.

Built from ``probes.digest`` digests, so a folder is read one file at a time (``slabscope report``). Past
``MANY_SESSIONS`` sessions the plots stay readable: no legend or peak labels (the tables name every session), the
timeline draws footprints only, the gather-run histogram sums the sessions, the metadata table turns to one row per
session, and only the first ``ACCOUNTING_PLOTS`` sessions get an accounting plot (the report says so).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from probes import figures
from probes.compare import format_table, rows_from_figures
from probes.digest import SessionDigest, digest
from probes.outfile import write_atomically
from probes.sampler import FOOTPRINT_PARTS, accounting_parts
from probes.tables import Column, render_table

MIB = 2**20
MANY_SESSIONS = 16    # more sessions than this: plots without per-session legends and labels
REPORT_NAME = "report.md"
ACCOUNTING_PLOTS = 16  # accounting plots for at most this many sessions (the first ones)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, ax, path: str, legend_loc: str = "best", legend: bool = True) -> None:
    """Legend (unless too many), tight layout, write the PNG and free the figure (every plot ends this way)."""
    if legend:
        ax.legend(fontsize=7, loc=legend_loc)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timeline(digests: list[SessionDigest], path: str) -> None:
    plt = _plt()
    few = len(digests) <= MANY_SESSIONS
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for index, d in enumerate(digests):
        s = d.series
        line, = ax.plot(s.t, [v / MIB for v in s.footprint], label=f"{d.label} max(act+cache)",
                        linewidth=1.5 if few else 0.5, alpha=1.0 if few else 0.5)
        if not few:
            continue
        ax.plot(s.t, [v / MIB for v in s.rss], color=line.get_color(), alpha=0.4, linestyle="--",
                label=f"{d.label} RSS")
        if s.peak is not None:
            t, value, label = s.peak
            ax.plot([t], [value / MIB], marker="v", color=line.get_color())
            ax.annotate(f"{value / MIB:.0f} MiB ({label})", (t, value / MIB), fontsize=7,
                        textcoords="offset points", xytext=(4, 4 + 11 * index))
    for i, (name, start, end) in enumerate(digests[0].phase_spans if digests else []):
        ax.axvspan(start, end, color="grey", alpha=0.08 if i % 2 else 0.16)
        ax.text(start, ax.get_ylim()[1] * 0.98, name, fontsize=7, va="top")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("MiB")
    ax.set_title("Memory timeline (phases of the first session shaded)" if few else
                 f"Memory timeline: max(act+cache) of {len(digests):,} sessions (phases of the first shaded)")
    _save(plt, fig, ax, path, legend_loc="lower right", legend=few)


def plot_accounting(view, path: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 4))
    samples = view.samples.window()
    parts = [accounting_parts(view.samples.at(i)) for i in range(len(samples))]
    ax.stackplot(samples.t, *[[p[k].bytes / MIB for p in parts] for k in range(len(FOOTPRINT_PARTS))],
                 labels=FOOTPRINT_PARTS, alpha=0.8)
    ax.plot(samples.t, [v / MIB for v in samples.rss], color="black", linewidth=1,
            label="RSS (gap to the stack = RSS not explained by MLX)")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("MiB")
    ax.set_title(f"Accounting: {_label(view)}")
    _save(plt, fig, ax, path, legend_loc="upper left")


def _label(view) -> str:
    return str(view.meta.get("label") or view.meta.get("backend") or os.path.basename(view.path))


def plot_slabs(digests: list[SessionDigest], path: str) -> bool:
    pooled = [d for d in digests if d.slabs is not None]
    if not pooled:
        return False
    plt = _plt()
    few = len(pooled) <= MANY_SESSIONS
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for d in pooled:
        ts, slabs, design = d.slabs
        ax.step(ts, slabs, where="post", label=f"{d.label} ({design})", linewidth=1.5 if few else 0.5)
    ax.set_xlabel("seconds since start")
    ax.set_ylabel(figures.LABELS["slabs"] + " (monolithic: grow chunks)")
    ax.set_title("Slabs held over time" + ("" if few else f": {len(pooled):,} sessions"))
    _save(plt, fig, ax, path, legend=few)
    return True


def plot_gather_hist(digests: list[SessionDigest], path: str) -> bool:
    hists = [(d.label, d.gather_hist) for d in digests if d.gather_hist]
    if not hists:
        return False
    if len(hists) > MANY_SESSIONS:
        total: Counter = Counter()
        for _, hist in hists:
            total.update(hist)
        hists = [(f"all {len(hists):,} sessions", total)]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / len(hists)
    ticks: set[int] = set()
    for i, (label, hist) in enumerate(hists):
        xs = sorted(hist)
        ticks.update(xs)
        offset = (i - (len(hists) - 1) / 2) * width  # bars of one run count grouped around the integer tick
        ax.bar([x + offset for x in xs], [hist[x] for x in xs], width=width, label=label)
    ax.set_xticks(sorted(ticks))
    ax.set_xlabel("same-slab runs per sequence per decode step")
    ax.set_ylabel("(decode step, sequence) pairs")
    ax.set_title("Gather-run histogram (" + figures.LABELS["gather_runs"] + " is its mean and largest bar)")
    _save(plt, fig, ax, path)
    return True


def _meta_cell(value) -> str:
    """One table cell: a dict shows its name (or its scalar items), None shows "-"."""
    if value is None:
        return "-"
    if isinstance(value, dict):
        if "name" in value:
            return str(value["name"])
        return ", ".join(f"{k}={v}" for k, v in value.items() if not isinstance(v, (dict, list)) and v is not None)
    return str(value).replace("|", "/")


def _completeness(d: SessionDigest) -> str:
    if d.damage is not None:
        return f"NO (damaged file: {d.damage.replace('|', '/')}; the valid part before it is shown)"
    return "yes" if d.complete else "NO (writer died)"


META_ROWS = ("backend", "scenario", "model", "device", "mlx_version", "mlx_lm_version", "slabscope_version", "commit",
             "pool")


def _meta_cells(d: SessionDigest) -> list[str]:
    cost = figures.format_probe_cost(d.probe_cost)
    return [_meta_cell(d.meta.get(key)) for key in META_ROWS] + [f"{d.duration:.1f} s", _completeness(d), cost]


def _meta_table(digests: list[SessionDigest]) -> list[str]:
    """Keys as rows and sessions as columns; one row per session past MANY_SESSIONS (a Markdown table)."""
    names = [*META_ROWS, "duration", "complete", figures.LABELS["probe_cost"] + " (of wall time)"]
    cells = [_meta_cells(d) for d in digests]
    if len(digests) > MANY_SESSIONS:
        table = render_table([Column("session"), *(Column(n) for n in names)],
                             [(f"`{d.path}`", *row) for d, row in zip(digests, cells)], markdown=True)
    else:
        table = render_table([Column(""), *(Column(d.label.replace("|", "/")) for d in digests)],
                             [(name, *(row[k] for row in cells)) for k, name in enumerate(names)], markdown=True)
    return table.splitlines()


def report_digest(view) -> SessionDigest:
    """What the report keeps of one session (its compare figures and plot series)."""
    return digest(view, series=True)


def write_report(views, out_dir: str, baseline: int = 0) -> str:
    """Write ``report.md`` and PNGs into ``out_dir`` for sessions held in memory; returns the Markdown path."""
    views = list(views)
    os.makedirs(out_dir, exist_ok=True)
    accounting = [_accounting_png(view, i, out_dir) for i, view in enumerate(views[:ACCOUNTING_PLOTS])]
    return write_report_from([report_digest(v) for v in views], out_dir, baseline, accounting)


def _accounting_png(view, index: int, out_dir: str) -> str:
    name = f"accounting-{index}.png"
    plot_accounting(view, os.path.join(out_dir, name))
    return name


def write_report_from(digests: list[SessionDigest], out_dir: str, baseline: int, accounting: list[str]) -> str:
    """``report.md`` and the plots from digests; ``accounting``: the accounting PNGs written for the first
    sessions (``plot_accounting`` needs the whole session, so the caller draws them while it has it)."""
    labels = [str(d.meta.get("label") or d.meta.get("backend") or f"session{i}") for i, d in enumerate(digests)]
    rows = rows_from_figures([d.phases for d in digests], labels,
                             [str(d.meta.get("backend", "?")) for d in digests], baseline)
    md = ["# slabscope report", "", "Sessions: " + ", ".join(f"`{d.path}`" for d in digests), "",
          "## Compare (per phase)", "", format_table(rows, markdown=True), "",
          "Footprint = max(active + cache) sampled in-process (MLX's own peak counter misses the buffer cache); "
          "per-phase figures are \"max in window\" of the phase. Every figure is defined in `probes/figures.py` "
          "(docs/contracts.md).", "", "## Sessions", "", *_meta_table(digests), ""]
    plot_timeline(digests, os.path.join(out_dir, "timeline.png"))
    md += ["## Memory timeline", "", "![memory timeline](timeline.png)", ""]
    md += ["## Accounting", ""]
    if len(accounting) < len(digests):
        md += [f"Accounting plots for the first {len(accounting)} of {len(digests):,} sessions (every session is in "
               "the tables above).", ""]
    for d, name in zip(digests, accounting):
        md += [f"![accounting {d.label}]({name})", ""]
    if plot_slabs(digests, os.path.join(out_dir, "slabs.png")):
        md += ["## Slab count", "", "![slab count](slabs.png)", ""]
    if plot_gather_hist(digests, os.path.join(out_dir, "gather_runs.png")):
        md += ["## Gather runs", "", "![gather runs](gather_runs.png)", ""]
    path = os.path.join(out_dir, REPORT_NAME)
    write_atomically(path, lambda temp: Path(temp).write_text("\n".join(md)), force=True)  # main checked it
    return path
