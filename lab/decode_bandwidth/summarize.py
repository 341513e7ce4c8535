"""Tabulate interleaved `bench decode --out` runs of several kernel trees: per (B, context), each tree's fused us and
GB/s as median [range] over its rounds, MLX's contiguous SDPA beside them (from the same processes), and fused / SDPA.

    python3 -m lab.decode_bandwidth.summarize DIR      # DIR holds <tree>_r<round>.json (run.sh writes them)

Pure Python (json, statistics): runs anywhere.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def _span(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):,.{digits}f} [{min(values):,.{digits}f}-{max(values):,.{digits}f}]"


def load(folder: Path) -> dict:
    """{tree: {(batch, context): [row per round]}} from ``<tree>_r<N>.json`` files."""
    cells: dict = defaultdict(lambda: defaultdict(list))
    for path in sorted(folder.glob("*_r*.json")):
        tree = path.stem.rsplit("_r", 1)[0]
        for row in json.loads(path.read_text())["rows"]:
            cells[tree][(row["batch"], row["context"])].append(row)
    return cells


def table(cells: dict) -> str:
    """A markdown table: one line per (cell, tree)."""
    lines = ["| B | context | tree | rounds | fused us | fused GB/s | SDPA us | fused / SDPA (per-round median) |",
             "|---:|---:|---|---:|---:|---:|---:|---:|"]
    keys = sorted({key for per_tree in cells.values() for key in per_tree})
    for key in keys:
        for tree, per_tree in cells.items():
            rows = per_tree.get(key)
            if not rows:
                continue
            fused = [r["fused_us"] for r in rows]
            ratios = [r["fused_us"] / r["sdpa_us"] for r in rows]
            lines.append(f"| {key[0]} | {key[1]:,} | {tree} | {len(rows)} | {_span(fused)} | "
                         f"{_span([r['gbps_fused'] for r in rows], 0)} | {_span([r['sdpa_us'] for r in rows])} | "
                         f"{_span(ratios, 2)} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python3 -m lab.decode_bandwidth.summarize DIR", file=sys.stderr)
        return 2
    print(table(load(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
