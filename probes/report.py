"""Markdown report with PNG plots for one or more sessions (matplotlib, Agg backend; no mlx).

Plots: memory timeline (max(active+cache) and RSS per backend, phases shaded, "max since start" peak marked),
accounting stack per session (weights / pool live / pool reserved-free / other MLX active / MLX cache, with the
RSS remainder drawn as its own line: never hidden), slab count over time (max over layers) and the gather-run
histogram (all layers, whole run). Tables: the compare table and each session's metadata and probe cost.
"""

from __future__ import annotations

import os
from collections import Counter

from probes.compare import compare_sessions, format_table
from probes.sampler import FOOTPRINT_PARTS, accounting_parts

MIB = 2**20


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(view) -> str:
    return str(view.meta.get("label") or view.meta.get("backend") or os.path.basename(view.path))


def _save(plt, fig, ax, path: str, legend_loc: str = "best") -> None:
    """Legend, tight layout, write the PNG and free the figure (every plot ends this way)."""
    ax.legend(fontsize=7, loc=legend_loc)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timeline(views, path: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for index, view in enumerate(views):
        samples = view.samples.window()
        line, = ax.plot(samples.t, [v / MIB for v in samples.footprint], label=f"{_label(view)} max(act+cache)")
        ax.plot(samples.t, [v / MIB for v in samples.rss], color=line.get_color(), alpha=0.4,
                linestyle="--", label=f"{_label(view)} RSS")
        peak = view.peak("footprint")
        if peak.t is not None:
            ax.plot([peak.t], [peak.value / MIB], marker="v", color=line.get_color())
            ax.annotate(f"{peak.value / MIB:.0f} MiB ({peak.label})", (peak.t, peak.value / MIB), fontsize=7,
                        textcoords="offset points", xytext=(4, 4 + 11 * index))
    for i, span in enumerate(views[0].phases() if views else []):
        end = span.end if span.end is not None else views[0].duration
        ax.axvspan(span.start, end, color="grey", alpha=0.08 if i % 2 else 0.16)
        ax.text(span.start, ax.get_ylim()[1] * 0.98, span.name, fontsize=7, va="top")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("MiB")
    ax.set_title("Memory timeline (phases of the first session shaded)")
    _save(plt, fig, ax, path, legend_loc="lower right")


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


def plot_slabs(views, path: str) -> bool:
    pooled = [v for v in views if v.snapshots]
    if not pooled:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for view in pooled:
        ts = [s.t for s in view.snapshots]
        slabs = [max((layer.num_chunks for layer in s.snapshot.layers), default=0) for s in view.snapshots]
        ax.step(ts, slabs, where="post", label=f"{_label(view)} ({view.snapshots[-1].snapshot.design})")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("slabs / grow chunks per layer")
    ax.set_title("Slab count over time (max over layers)")
    _save(plt, fig, ax, path)
    return True


def gather_hist(view) -> Counter:
    """Whole-run gather-run histogram summed over layers (from the last snapshot)."""
    hist: Counter = Counter()
    if view.snapshots:
        for layer in view.snapshots[-1].snapshot.layers:
            hist.update(layer.gather_runs_hist)
    return hist


def plot_gather_hist(views, path: str) -> bool:
    hists = [(v, gather_hist(v)) for v in views]
    hists = [(v, h) for v, h in hists if h]
    if not hists:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / len(hists)
    ticks: set[int] = set()
    for i, (view, hist) in enumerate(hists):
        xs = sorted(hist)
        ticks.update(xs)
        offset = (i - (len(hists) - 1) / 2) * width  # bars of one run count grouped around the integer tick
        ax.bar([x + offset for x in xs], [hist[x] for x in xs], width=width, label=_label(view))
    ax.set_xticks(sorted(ticks))
    ax.set_xlabel("same-slab runs per gather")
    ax.set_ylabel("gathers (all layers)")
    ax.set_title("Gather-run histogram")
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


def _completeness(view) -> str:
    if view.damage is not None:
        return f"NO (damaged file: {str(view.damage).replace('|', '/')}; the valid part before it is shown)"
    return "yes" if view.complete else "NO (writer died)"


def _meta_table(views) -> list[str]:
    keys = ("backend", "scenario", "model", "device", "mlx_version", "mlx_lm_version", "slabscope_version", "commit",
            "pool")
    lines = ["| | " + " | ".join(_label(v) for v in views) + " |", "|---" * (len(views) + 1) + "|"]
    for key in keys:
        lines.append(f"| {key} | " + " | ".join(_meta_cell(v.meta.get(key)) for v in views) + " |")
    lines.append("| duration | " + " | ".join(f"{v.duration:.1f} s" for v in views) + " |")
    lines.append("| complete | " + " | ".join(_completeness(v) for v in views) + " |")
    cost = [f"{100 * v.overhead.cost_fraction:.2f}% wall" if v.overhead else "-" for v in views]
    lines.append("| probe cost | " + " | ".join(cost) + " |")
    return lines


def write_report(views, out_dir: str, baseline: int = 0) -> str:
    """Write ``report.md`` and PNGs into ``out_dir``; returns the Markdown path."""
    os.makedirs(out_dir, exist_ok=True)
    md = ["# slabscope report", "", "Sessions: " + ", ".join(f"`{v.path}`" for v in views), "",
          "## Compare (per phase)", "", "```", format_table(compare_sessions(views, baseline=baseline)), "```", "",
          "Footprint = max(active + cache) sampled in-process (MLX's own peak counter misses the buffer cache); "
          "per-phase figures are \"max in window\" of the phase.", "", "## Sessions", "", *_meta_table(views), ""]
    plot_timeline(views, os.path.join(out_dir, "timeline.png"))
    md += ["## Memory timeline", "", "![memory timeline](timeline.png)", ""]
    md += ["## Accounting", ""]
    for i, view in enumerate(views):
        name = f"accounting-{i}.png"
        plot_accounting(view, os.path.join(out_dir, name))
        md += [f"![accounting {_label(view)}]({name})", ""]
    if plot_slabs(views, os.path.join(out_dir, "slabs.png")):
        md += ["## Slab count", "", "![slab count](slabs.png)", ""]
    if plot_gather_hist(views, os.path.join(out_dir, "gather_runs.png")):
        md += ["## Gather runs", "", "![gather runs](gather_runs.png)", ""]
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as fh:
        fh.write("\n".join(md))
    return path
