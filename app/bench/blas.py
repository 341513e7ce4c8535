"""``slabscope bench blas``: fp32 matmul on MLX's CPU backend with its bundled reference BLAS against Debian's
OpenBLAS (``app/models/blas.py``), the README's speed-up figure.

Each measurement runs in a fresh process, because the BLAS is chosen when mlx's shared library is loaded: the
child (this module run as ``python -m app.bench.blas WHICH SIZE REPEATS``) calls ``enable_openblas()`` before its
first ``import mlx.core`` when WHICH is ``openblas`` (the app's bootstrap, as every worker does), and not at all for
``reference``; then one ``SIZE x SIZE x SIZE`` matmul as a warm-up and the mean of ``REPEATS`` more. The two BLASes
alternate order round by round (``rounds`` rounds); OpenBLAS runs with ``threads`` threads (one by default, as
each of two workers on two cores uses). Per round the speed-up is reference time / OpenBLAS time; reported as the
median and range over rounds, with each child's own line naming the BLAS it ran on.

This module must not import mlx at import time: the child imports it before loading OpenBLAS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from app.bench.stats import spread

BLASES = ("reference", "openblas")


def measure_in_this_process(which: str, size: int, repeats: int) -> tuple[str, float]:
    """(BLAS line, mean seconds per ``size``^3 fp32 matmul) in this process, after one warm-up matmul. Loads
    OpenBLAS first when ``which`` is ``openblas``; must run before anything in this process imported mlx."""
    from app.models.blas import blas_line, enable_openblas

    line = enable_openblas() if which == "openblas" else blas_line()
    import mlx.core as mx

    a, b = mx.random.normal((size, size)), mx.random.normal((size, size))
    mx.eval(a @ b)
    start = time.perf_counter()
    for _ in range(repeats):
        mx.eval(a @ b)
    return line, (time.perf_counter() - start) / repeats


def measure_fresh(which: str, size: int, repeats: int, threads: int) -> tuple[str, float]:
    """``measure_in_this_process`` in a fresh interpreter with ``OPENBLAS_NUM_THREADS=threads``."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, "-m", "app.bench.blas", which, str(size), str(repeats)],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the {which} measurement process failed (exit {done.returncode}): {tail}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["blas"], result["seconds"]


def run_blas_bench(rounds: int, size: int, repeats: int, threads: int, progress=None) -> dict:
    """Interleaved fresh-process rounds of both BLASes; returns the figures (see the module docstring)."""
    seconds: dict[str, list[float]] = {which: [] for which in BLASES}
    lines: dict[str, str] = {}
    for r in range(rounds):
        for which in BLASES if r % 2 == 0 else BLASES[::-1]:
            lines[which], took = measure_fresh(which, size, repeats, threads)
            seconds[which].append(took)
            if progress:
                progress(f"round {r + 1}/{rounds} {which}: {took * 1e3:.1f} ms per matmul")
    speedups = [ref / fast for ref, fast in zip(seconds["reference"], seconds["openblas"])]
    return {"size": size, "repeats": repeats, "rounds": rounds, "threads": threads, "blas": lines,
            "seconds": seconds, "seconds_stats": {which: spread(v) for which, v in seconds.items()},
            "speedups": speedups, "speedup": spread(speedups)}


def format_report(result: dict) -> str:
    n, s = result["size"], result["speedup"]
    lines = [f"fp32 {n}x{n}x{n} matmul on MLX's CPU backend: mean of {result['repeats']} after a warm-up, a fresh "
             f"process per measurement, OPENBLAS_NUM_THREADS={result['threads']}"]
    lines += [f"{which:9s} {line}" for which, line in result["blas"].items()]
    lines += [f"{which:9s} ms per matmul: " + ", ".join(f"{1e3 * v:.1f}" for v in values)
              for which, values in result["seconds"].items()]
    lines.append(f"OpenBLAS speed-up: median {s['median']:.1f}x [{s['min']:.1f}x .. {s['max']:.1f}x] over "
                 f"{result['rounds']} interleaved rounds")
    return "\n".join(lines)


def _child(argv: list[str]) -> int:
    which, size, repeats = argv[0], int(argv[1]), int(argv[2])
    if which not in BLASES:
        raise SystemExit(f"app.bench.blas: WHICH must be one of {', '.join(BLASES)}, got {which!r}")
    line, took = measure_in_this_process(which, size, repeats)
    print(json.dumps({"blas": line, "seconds": took}))
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(sys.argv[1:]))
