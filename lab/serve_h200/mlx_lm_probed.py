"""``mlx_lm.server`` with the same memory probe slabscope's engine has: a thread in its process samples MLX's active
and cache memory and the process RSS (``SAMPLE_HZ``) and keeps the maxima in a JSON file (written by temp + rename),
so its peak footprint, max(active + cache), is measured the way ``slabscope serve``'s probes measure theirs.

    python3 -m lab.serve_h200.mlx_lm_probed --probe-out PEAK.json -- --model DIR --host 127.0.0.1 --port 8080

Everything after ``--`` is mlx_lm.server's own command line. On Linux the OpenBLAS loader slabscope uses is applied
first (CPU runs: the same BLAS as slabscope's engine).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time

SAMPLE_HZ = 50.0


def probe(path: str, stop: threading.Event, blas: str) -> None:
    import mlx.core as mx
    import psutil

    process = psutil.Process()
    peak = {"footprint_max": 0, "active_max": 0, "cache_max": 0, "rss_max": 0, "samples": 0, "pid": os.getpid(),
            "blas": blas}
    next_write = 0.0
    while not stop.wait(1.0 / SAMPLE_HZ):
        active, cache, rss = mx.get_active_memory(), mx.get_cache_memory(), process.memory_info().rss
        peak["footprint_max"] = max(peak["footprint_max"], active + cache)
        peak["active_max"] = max(peak["active_max"], active)
        peak["cache_max"] = max(peak["cache_max"], cache)
        peak["rss_max"] = max(peak["rss_max"], rss)
        peak["samples"] += 1
        now = time.monotonic()
        if now >= next_write:
            next_write = now + 0.2
            with open(path + ".tmp", "w") as fh:
                json.dump(peak, fh)
            os.replace(path + ".tmp", path)


def main() -> None:
    argv = sys.argv[1:]
    if "--" not in argv or "--probe-out" not in argv[:argv.index("--")]:
        print(__doc__)
        sys.exit(0 if {"-h", "--help"} & set(argv) else 2)
    split = argv.index("--")
    own, server = argv[:split], argv[split + 1:]
    out = own[own.index("--probe-out") + 1]
    try:
        from app.models.blas import enable_openblas  # PYTHONPATH=. from the repository root

        blas = enable_openblas()
    except ImportError:
        blas = "unknown (app.models.blas not importable)"
    import mlx.core  # noqa: F401 - the probe thread reads its counters

    threading.Thread(target=probe, args=(out, threading.Event(), blas), daemon=True).start()
    sys.argv = ["mlx_lm.server", *server]
    runpy.run_module("mlx_lm.server", run_name="__main__")


if __name__ == "__main__":
    main()
