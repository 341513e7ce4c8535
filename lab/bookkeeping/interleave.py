"""``slabscope bench bookkeeping`` in several source trees, interleaved: per tree and layer count, the per-step sum
of the bench's figures (us), median and range over the rounds, after one warm-up round that is not counted.

    .venv/bin/python lab/bookkeeping/interleave.py --tree old=/tmp/old --tree new=. --rounds 5

Each run is a fresh process (``python -m app bench bookkeeping --json``) with the tree as its working directory, so
``app`` is imported from that tree (an older tree without the bench: copy app/bench/decode_bookkeeping.py and
app/commands/bench_bookkeeping.py in). Rounds alternate the trees and layer counts, so drift on a shared machine
lands on both. Prints one line per (tree, layers) and the 28-to-1 ratio of each tree's medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys


def run(tree: str, layers: int, args) -> dict:
    command = [sys.executable, "-m", "app", "bench", "bookkeeping", "--layers", str(layers), "--batch",
               str(args.batch), "--context", str(args.context), "--number", str(args.number), "--json"]
    out = subprocess.run(command, cwd=tree, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["us_per_call"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a source tree (repeatable)")
    parser.add_argument("--layers", default="1,28", help="layer counts (default 1,28)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--context", type=int, default=2300)
    parser.add_argument("--number", type=int, default=200)
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.tree)
    layer_counts = [int(n) for n in args.layers.split(",")]
    totals: dict[tuple[str, int], list[float]] = {}
    figures: dict[tuple[str, int], list[dict]] = {}
    for round_index in range(args.rounds + 1):
        for name, tree in trees.items():
            for layers in layer_counts:
                result = run(tree, layers, args)
                if round_index:  # round 0 warms caches and the file system up
                    totals.setdefault((name, layers), []).append(sum(result.values()))
                    figures.setdefault((name, layers), []).append(result)
    for (name, layers), values in totals.items():
        parts = ", ".join(f"{key} {statistics.median(f[key] for f in figures[name, layers]):.1f}"
                          for key in figures[name, layers][0])
        print(f"{name:6s} {layers:3d} layers: {statistics.median(values):7.1f} us per step "
              f"(range {min(values):.1f}-{max(values):.1f}, {len(values)} rounds; medians: {parts})")
    for name in trees:
        low, high = min(layer_counts), max(layer_counts)
        ratio = statistics.median(totals[name, high]) / statistics.median(totals[name, low])
        print(f"{name:6s} {high} layers / {low} layer: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
