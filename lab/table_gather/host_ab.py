"""The table write's host cost on a CPU: ``slabscope bench host --emulate-cuda`` (the CUDA fused route's host side,
kernels replaced by zeros) with ``SLABSCOPE_TABLE_WRITE`` on and off at several slab sizes, interleaved over fresh
processes; per cell the median [range] over rounds of each run's median decode build and host ms per step.

    PYTHONPATH=. python3 -m lab.table_gather.host_ab --rounds 5 --slab-blocks 8,128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

COMMAND = ["-m", "app", "bench", "host", "--emulate-cuda", "--scenario", "distinct_burst", "--set", "n=16", "--set",
           "prompt_tokens=1024", "--set", "gen_tokens=24", "--model", "synthetic:tiny-qwen3-28l", "--dtype",
           "float32", "--device", "cpu", "--engines", "slab", "--no-ops", "--json"]


def one_run(rows: int, write: str) -> dict:
    env = dict(os.environ, SLABSCOPE_TABLE_WRITE=write)
    done = subprocess.run([sys.executable, *COMMAND, "--slab-blocks", str(rows)], capture_output=True, text=True,
                          env=env, timeout=600, check=True)
    stats = json.loads(done.stdout)["engines"]["slab"]["decode"]["stats"]
    return {name: stats[name]["median"] for name in ("build_ms", "host_ms")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slab-blocks", default="8,128")
    args = parser.parse_args()
    cells = [(int(rows), write) for rows in args.slab_blocks.split(",") for write in ("1", "0")]
    results: dict = {cell: [] for cell in cells}
    for round_index in range(args.rounds):
        order = cells if round_index % 2 == 0 else cells[::-1]
        for rows, write in order:
            figures = one_run(rows, write)
            results[(rows, write)].append(figures)
            print(json.dumps({"round": round_index, "slab_blocks": rows, "table_write": write, **figures}),
                  flush=True)
    for (rows, write), runs in results.items():
        line = []
        for name in ("build_ms", "host_ms"):
            values = [r[name] for r in runs]
            line.append(f"{name} {statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]")
        print(f"--slab-blocks {rows} SLABSCOPE_TABLE_WRITE={write}: " + ", ".join(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
