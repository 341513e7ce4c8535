"""The decode step's host build time on the decode-heavy case, before and after a change: ``engine_anatomy.py`` of
two source trees in alternating processes (each warms up, then times ``--rounds`` rounds of slab and dense), and
per tree the median and range over every timed round of each backend's ``build_ms``, ``encode_ms`` and
``step_ms`` (ms per decode step) and ``tok_s``.

On the GPU (issue 24: OLD = 5241d86, NEW = the one-row-space commit; the device copy of the working tree carries
the old tree as an ignored folder):

    python3 lab/bookkeeping/build_time_ab.py --tree old=.old5241 --tree new=. --pairs 3 --rounds 2

On a CPU, ``--cpu`` runs the CUDA route's host side emulated on a 28-layer toy model instead (only ``build``
means what it means on a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

GPU_ARGS = ["--model", "synthetic:qwen3-0.6b", "--dtype", "bfloat16", "--device", "gpu", "--set", "n=16",
            "--set", "prompt_tokens=2048", "--set", "gen_tokens=256"]
CPU_ARGS = ["--emulate-cuda", "--device", "cpu", "--dtype", "float32", "--model", "synthetic:tiny-qwen3-28l",
            "--set", "n=16", "--set", "prompt_tokens=256", "--set", "gen_tokens=24", "--slab-blocks", "8",
            "--prefill-chunk", "256"]
SCRIPTS = ("lab/decode_step/engine_anatomy.py", "app/bench/device/engine_anatomy.py")  # where each tree keeps it
FIGURES = ("build_ms", "encode_ms", "step_ms", "tok_s")


def anatomy(tree: str) -> str:
    for path in SCRIPTS:
        if os.path.exists(os.path.join(tree, path)):
            return path
    raise SystemExit(f"{tree}: no engine_anatomy.py at {' or '.join(SCRIPTS)}")


def run(tree: str, args) -> list[dict]:
    """The timed rounds (round > 0) one process of ``tree`` prints."""
    command = [sys.executable, anatomy(tree), *(CPU_ARGS if args.cpu else GPU_ARGS), "--rounds", str(args.rounds),
               "--backends", args.backends]
    result = subprocess.run(command, cwd=tree, env=dict(os.environ, PYTHONPATH="."), capture_output=True, text=True,
                            timeout=args.timeout)
    if result.returncode:
        raise SystemExit(f"{tree}: exit {result.returncode}\n{result.stderr[-3000:]}")
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return [row for row in rows if row["round"] > 0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH (repeatable)")
    parser.add_argument("--pairs", type=int, default=3, help="processes per tree, alternating (default 3)")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per process (default 2)")
    parser.add_argument("--backends", default="slab,dense")
    parser.add_argument("--cpu", action="store_true", help="the emulated CUDA route on a CPU (toy model)")
    parser.add_argument("--timeout", type=int, default=900)
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.tree)
    rows: dict[str, list[dict]] = {name: [] for name in trees}
    for pair in range(args.pairs):
        order = list(trees) if pair % 2 == 0 else list(trees)[::-1]
        for name in order:
            for row in run(trees[name], args):
                rows[name].append(row)
                print(json.dumps({"tree": name, "pair": pair, **row}), flush=True)
    for name, timed in rows.items():
        for backend in args.backends.split(","):
            mine = [row for row in timed if row["backend"] == backend]
            cells = []
            for key in FIGURES:
                values = [row[key] for row in mine if row.get(key) is not None]
                if values:
                    cells.append(f"{key} {statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]")
            print(f"{name} {backend} ({len(mine)} rounds): " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
