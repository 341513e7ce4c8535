"""What a recording's start and stop cost: ``WorkerProbes`` built, attached to a 28-layer pool, started (metadata,
recording file, first snapshot and sample) and stopped (final snapshot, flush, END record), ``--rounds`` times in one
process (as `bench probes` and `serve` start many). Prints each round's start and stop in ms.

    PYTHONPATH=. python3 -m lab.probe_cost.start_cost --rounds 3
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from app.models.blas import enable_openblas

    enable_openblas()
    from pool import PagedKVPool, PoolConfig
    from probes.live import WorkerProbes

    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            pool = PagedKVPool(PoolConfig(num_layers=28, block_size=32, slab_blocks=32))
            begin = time.perf_counter()
            probes = WorkerProbes(None, sample_hz=100, snapshot_hz=0.5, record_path=os.path.join(tmp, "a.slabrec"),
                                  meta={"scenario": "t"})
            probes.attach_pool(pool)
            probes.start()
            started = time.perf_counter()
            probes.stop({})
            print(f"start {1e3 * (started - begin):.1f} ms, stop {1e3 * (time.perf_counter() - started):.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
