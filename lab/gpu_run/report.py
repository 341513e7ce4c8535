"""The docs tables of the GPU run (``run.sh``), as Markdown, from its output directory.

    python3 -m lab.gpu_run.report OUT > report.md

OUT holds ``a/`` and ``b/`` (the halves' outputs: ``<half>.json`` step results, recordings under ``a/rec_*``,
``a/correctness.jsonl``), or the tarballs ``final_a.tar.gz`` / ``final_b.tar.gz`` that hold them (unpacked into a
temporary directory). Every table names the step and command that produced it; a step that failed or did not run
is reported as such, never skipped silently.
"""

from __future__ import annotations

import argparse
import json
import os
import tarfile
import tempfile

from lab.kernel_tuning.render_tables import correctness_table
from lab.record_figures import figures

MIB = 2**20
TRIMS = (("off", "rec_trim_off"), ("0.02", "rec_trim_0.02"), ("0.05 (default)", "rec_burst"),
         ("0.10", "rec_trim_0.10"))


def _load(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def unpacked(out: str) -> str:
    """A directory with ``a/`` and ``b/``: OUT itself, or the tarballs unpacked into a temporary one."""
    if os.path.isdir(os.path.join(out, "a")) or os.path.isdir(os.path.join(out, "b")):
        return out
    target = tempfile.mkdtemp(prefix="final-report-")
    for half in ("a", "b"):
        path = os.path.join(out, f"final_{half}.tar.gz")
        if os.path.exists(path):
            with tarfile.open(path) as tar:
                tar.extractall(target, filter="data")
    return target


def steps_table(results: dict[str, dict]) -> str:
    lines = ["| half | step | exit | wall s | note |", "|---|---|---:|---:|---|"]
    for half, res in results.items():
        for name, entry in res.items():
            if isinstance(entry, dict) and ("exit" in entry or "error" in entry):
                note = entry.get("error", "")
                lines.append(f"| {half} | {name} | {entry.get('exit', '-')} | {entry.get('wall_s', '-')} | {note} |")
        lines.append(f"| {half} | **whole half** | | {res.get('wall_s', '-')} | finished {res.get('finished', '-')} |")
    return "\n".join(lines)


def records(directory: str) -> list[dict]:
    """``lab.record_figures`` of every recording in ``directory`` ([] when it holds none)."""
    if not os.path.isdir(directory):
        return []
    rows = [figures(os.path.join(directory, n)) for n in sorted(os.listdir(directory)) if n.endswith(".slabrec")]
    dense = next((r for r in rows if r["backend"] == "dense"), None)
    for r in rows:
        r["tok_s_over_dense"] = r["tok_s"] / dense["tok_s"] if dense and r["tok_s"] and dense["tok_s"] else None
    return rows


def record_table(a_dir: str, names: list[str]) -> str:
    lines = ["| record | backend | tok/s | vs dense | first fused step | median step | first fused / median | "
             "max(active+cache) | / (weights + live KV) | trims | growths | declines (layer-steps) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name in names:
        rows = records(os.path.join(a_dir, name))
        if not rows:
            lines.append(f"| {name} | (no recording) | | | | | | | | | | |")
        for r in rows:
            first = "-" if r["first_fused_step_index"] is None else \
                f"#{r['first_fused_step_index']}, {r['first_fused_step_ms']:.1f} ms"
            lines.append(
                f"| {name} | {r['backend']} | {_f(r['tok_s'], ',.0f')} | {_f(r['tok_s_over_dense'], '.2f')}x | "
                f"{first} | {_f(r['median_decode_step_ms'], '.1f')} ms | {_f(r['first_fused_over_median'], '.2f')} | "
                f"{r['footprint_bytes'] / MIB:,.0f} MiB | {_f(r['footprint_over_ideal'], '.3f')}x of "
                f"{_f(r['ideal_bytes'] and r['ideal_bytes'] / MIB, ',.0f')} MiB | "
                f"{(r['cache_trim'] or {}).get('trims', '-')} | {_f(r['pool_growths'], 'd')} | "
                f"{sum((r['declines'] or {}).values()) or '-'} {list((r['declines'] or {}))[:2] or ''} |")
    return "\n".join(lines)


def parts_table(a_dir: str, names: list[str]) -> str:
    """The footprint peak's sample taken apart (MiB): weights, live K/V, reserved-free pool rows, other active
    arrays (activations and transients; the dense caches for dense), MLX's buffer cache."""
    lines = ["| record | backend | footprint | weights | live K/V | reserved free | other active | MLX cache |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        for r in records(os.path.join(a_dir, name)):
            parts = r.get("footprint_parts")
            if parts:
                cells = " | ".join(f"{parts[k] / MIB:,.0f}" for k in ("weights", "pool_live", "pool_free",
                                                                      "other_active", "cache"))
                lines.append(f"| {name} | {r['backend']} | {r['footprint_bytes'] / MIB:,.0f} | {cells} |")
    return "\n".join(lines)


def trim_table(a_dir: str) -> str:
    lines = ["| prefill trim | slab / (weights + live KV) | dense / (weights + live KV) | slab tok/s | dense tok/s | "
             "slab trims | dense trims |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, name in TRIMS:
        rows = {r["backend"]: r for r in records(os.path.join(a_dir, name))}
        slab, dense = rows.get("slab"), rows.get("dense")
        if not slab or not dense:
            lines.append(f"| {label} | (missing: {name}) | | | | | |")
            continue
        lines.append(f"| {label} | {_f(slab['footprint_over_ideal'], '.3f')}x | "
                     f"{_f(dense['footprint_over_ideal'], '.3f')}x | {_f(slab['tok_s'], ',.0f')} | "
                     f"{_f(dense['tok_s'], ',.0f')} | {(slab['cache_trim'] or {}).get('trims', '-')} | "
                     f"{(dense['cache_trim'] or {}).get('trims', '-')} |")
    return "\n".join(lines)


def throughput_section(entry: dict | None) -> str:
    from app.bench.throughput import format_report

    if not entry or "json" not in entry:
        return f"(not available: {(entry or {}).get('error', 'step not run')})"
    return "```\n" + format_report(entry["json"]) + "\n```"


def host_section(entry: dict | None) -> str:
    from app.bench.host_time import format_report

    if not entry or "json" not in entry:
        return f"(not available: {(entry or {}).get('error', 'step not run')})"
    return "```\n" + format_report(entry["json"]) + "\n```"


def growth_table(growth: dict) -> str:
    """``slabscope bench growth --json``'s designs as one table (footprint over the live K/V bytes last)."""
    keys = ["growth_events", "bytes_copied", "bytes_copied_model", "live_bytes", "max_active_plus_cache_bytes",
            "mx_peak_bytes", "wall_s", "gather_bytes_copied", "gather_bytes_copied_model"]
    lines = ["| design | " + " | ".join(keys) + " | footprint / live |", "|---|" + "---:|" * (len(keys) + 1)]
    for design, r in growth.items():
        ratio = r["max_active_plus_cache_bytes"] / r["live_bytes"] if r.get("live_bytes") else float("nan")
        lines.append(f"| {design} | " + " | ".join(str(r.get(k)) for k in keys) + f" | {ratio:.2f} |")
    return "\n".join(lines)


def text_tail(entry: dict | None, lines: int) -> str:
    if not entry or "stdout_tail" not in entry:
        return f"(not available: {(entry or {}).get('error', 'step not run')})"
    return "```\n" + "\n".join(entry["stdout_tail"].strip().splitlines()[-lines:]) + "\n```"


def report(out: str) -> str:
    base = unpacked(out)
    a_dir, b_dir = os.path.join(base, "a"), os.path.join(base, "b")
    warm, a, b = (_load(os.path.join(d, f"{h}.json")) for d, h in ((a_dir, "warm"), (a_dir, "a"), (b_dir, "b")))
    halves = {"warm": warm, "a": a, "b": b}
    a, b = {**b, **a}, {**a, **b}  # a step may run in either half (halves.py --only): look it up in both
    env = (warm.get("env") or {}).get("json") or {}
    correctness = os.path.join(a_dir, "correctness.jsonl")
    growth = (a.get("bench_growth") or {}).get("json")
    parts = [
        "# GPU run", "",
        f"Device: {env.get('info', {}).get('device_name', env.get('device', '?'))}, MLX {env.get('mlx', '?')}, "
        f"mlx-lm {env.get('mlx_lm', '?')}.", "",
        "## Steps and their times", steps_table(halves), "",
        "## Fresh-process records (`slabscope record ... --sample-hz 100 --snapshot-hz 0.5`, one process per "
        "backend)", record_table(a_dir, ["rec_burst", "rec_cold", "rec_heavy"]), "",
        "Compare table printed by `record` (rec_burst):", text_tail(a.get("rec_burst"), 12), "",
        "## Footprint at its peak sample, taken apart (MiB)",
        parts_table(a_dir, ["rec_burst", "rec_trim_off", "rec_trim_0.10", "rec_heavy"]), "",
        "## Prefill trim: footprint and throughput per setting (burst, slab and dense)", trim_table(a_dir), "",
        "## `slabscope bench throughput`: burst", throughput_section(b.get("throughput_burst")), "",
        "## `slabscope bench throughput`: decode-heavy", throughput_section(b.get("throughput_heavy")), "",
        "## `slabscope bench probes` (slab, burst)", "100 Hz:", text_tail(b.get("probes_100hz"), 5), "10 Hz:",
        text_tail(b.get("probes_10hz"), 5), "",
        "## `slabscope bench host` (burst)", host_section(b.get("bench_host")), "",
        "## `slabscope bench growth` (full size)",
        growth_table(growth) if growth else f"(not available: {(a.get('bench_growth') or {}).get('error', '-')})", "",
        "## Correctness: `python3 -m pytest -q tests/gpu`", text_tail(a.get("gpu_tests"), 3), "",
    ]
    if os.path.exists(correctness):
        with open(correctness) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        parts.append(correctness_table(recs) if recs else "(no error records)")
    return "\n".join(parts) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="run.sh's $OUT: a/ and b/, or final_a.tar.gz and final_b.tar.gz")
    print(report(parser.parse_args().out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
