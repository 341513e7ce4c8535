"""fp32 matmul on MLX's CPU backend, its bundled reference BLAS vs Debian's OpenBLAS (app/models/blas.py): one
1024 x 1024 x 1024 matmul, mean of 10 after a warm-up, each measurement in a fresh process (the BLAS is chosen at
load time), the two interleaved for ``--rounds`` rounds with the order alternating; one BLAS thread, as each
worker uses. Prints the times and the speed-up's median and range.

    .venv/bin/python tests/models/bench_blas.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ONE_RUN = r"""
import sys, time
if sys.argv[1] == "openblas":
    from app.models.blas import enable_openblas
    enable_openblas()
import mlx.core as mx
a, b = mx.random.normal((1024, 1024)), mx.random.normal((1024, 1024))
mx.eval(a @ b)
start = time.perf_counter()
for _ in range(10):
    mx.eval(a @ b)
print((time.perf_counter() - start) / 10)
"""


def one(which: str) -> float:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", ONE_RUN, which], capture_output=True, text=True, env=env,
                          check=True, cwd=REPO)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"reference": [], "openblas": []}
    for r in range(args.rounds):
        for which in ("reference", "openblas") if r % 2 == 0 else ("openblas", "reference"):
            times[which].append(one(which))
    speedups = [ref / fast for ref, fast in zip(times["reference"], times["openblas"])]
    for which, values in times.items():
        print(f"{which:9s} ms per matmul: " + ", ".join(f"{1e3 * v:.1f}" for v in values))
    print(f"OpenBLAS speed-up: median {statistics.median(speedups):.1f}x [{min(speedups):.1f}x .. "
          f"{max(speedups):.1f}x] over {args.rounds} interleaved rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
