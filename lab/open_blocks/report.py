"""The tables of ``record_ab.sh``'s archive (docs/measurements-log.md, the first decode step): per round, the burst's
record (slab at its default, open blocks high, beside dense) and slab with ``--open-blocks low``; then the median
and range per arm, and ``lab/first_step/first_step.py``'s lines. Figures from the recordings
(``lab.record_figures.figures``).

    python3 -m lab.open_blocks.report DIR   # DIR: ab.tar.gz unpacked
"""

from __future__ import annotations

import argparse
import json
import os

from lab.engine_rounds import spread
from lab.record_figures import figures

MIB = 1 << 20
CASES = ("burst", "heavy")


def _rows(directory: str) -> dict[str, dict]:
    """Figures of each backend's recording in ``directory``, by backend ({} when absent)."""
    if not os.path.isdir(directory):
        return {}
    paths = [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.endswith(".slabrec")]
    return {r["backend"]: r for r in map(figures, paths)}


def case_table(base: str, case: str) -> str:
    """One row per round, then the medians [ranges]."""
    lines = ["| round | slab (high) tok/s | dense tok/s | slab / dense | slab (low) tok/s | first fused / median: "
             "high | low | prefill ms: high / low | decode ms: high / low | footprint / (weights + live KV): "
             "high / low |", "|---|---:|---:|---:|---:|---:|---:|---|---|---|"]
    cols: dict[str, list[float]] = {k: [] for k in ("high", "dense", "ratio", "low", "fh", "fl")}
    rounds = sorted({int(n[len(case):-4]) for n in os.listdir(base) if n.startswith(case) and n.endswith("high")})
    for r in rounds:
        high, low = _rows(os.path.join(base, f"{case}{r}high")), _rows(os.path.join(base, f"{case}{r}low"))
        slab, dense, slab_low = high.get("slab"), high.get("dense"), low.get("slab")
        if not (slab and dense and slab_low):
            lines.append(f"| {r} | (missing recordings) | | | | | | | | |")
            continue
        ratio = slab["tok_s"] / dense["tok_s"]
        for key, value in (("high", slab["tok_s"]), ("dense", dense["tok_s"]), ("ratio", ratio),
                           ("low", slab_low["tok_s"]), ("fh", slab["first_fused_over_median"]),
                           ("fl", slab_low["first_fused_over_median"])):
            cols[key].append(value)
        lines.append(
            f"| {r} | {slab['tok_s']:,.0f} | {dense['tok_s']:,.0f} | {ratio:.2f}x | {slab_low['tok_s']:,.0f} | "
            f"{slab['first_fused_over_median']:.2f} ({slab['first_fused_step_ms']:.1f} / "
            f"{slab['median_decode_step_ms']:.1f} ms) | {slab_low['first_fused_over_median']:.2f} "
            f"({slab_low['first_fused_step_ms']:.1f} / {slab_low['median_decode_step_ms']:.1f} ms) | "
            f"{slab['prefill_ms']:,.0f} / {slab_low['prefill_ms']:,.0f} | {slab['decode_ms']:,.0f} / "
            f"{slab_low['decode_ms']:,.0f} | {slab['footprint_over_ideal']:.3f}x / "
            f"{slab_low['footprint_over_ideal']:.3f}x ({slab['footprint_bytes'] / MIB:,.0f} / "
            f"{slab_low['footprint_bytes'] / MIB:,.0f} MiB) |")
    lines.append(f"| median [range] | {spread(cols['high'], ',.0f')} | {spread(cols['dense'], ',.0f')} | "
                 f"{spread(cols['ratio'], '.2f')} | {spread(cols['low'], ',.0f')} | {spread(cols['fh'], '.2f')} | "
                 f"{spread(cols['fl'], '.2f')} | | | |")
    return "\n".join(lines)


def first_step_lines(base: str) -> str:
    path = os.path.join(base, "first_step.jsonl")
    if not os.path.exists(path):
        return "(no first_step.jsonl)"
    out = []
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            builds = [t.get("build_ms") for t in d["first_timings"]]
            out.append(f"- open blocks {d['open_blocks']}: decode steps 1-4 {d['first_steps_ms']} ms (median of the "
                       f"rest {d['median_rest_ms']}); graph build + dispatch of steps 1-4 {builds} ms (median "
                       f"{d['median_build_ms']}); tok/s {d['tok_s']:,.0f}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", help="record_ab.sh's archive, unpacked")
    base = parser.parse_args().directory
    for case in CASES:
        print(f"## {case}\n\n{case_table(base, case)}\n")
    print(f"## first_step.py\n\n{first_step_lines(base)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
