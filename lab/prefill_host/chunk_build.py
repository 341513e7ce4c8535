"""How long the host takes to build one prefill chunk's graph, per backend: the time from the engine's
``_prefill`` entry to its ``mx.async_eval`` (Python and MLX building every layer's writes, reads and attention),
over warm rounds of the distinct_burst run in one process. Each chunk is evaluated before the next is built, so a
build never shares the CPU with the previous chunk's compute (on a 2-core CPU it otherwise would). With
``--emulate-cuda`` the CUDA route's host side runs on a CPU (``app/bench/host_emulation.py``: kernels replaced by
zeros), so only the build times mean what they mean on a GPU. Prints one line: the median over rounds of each
round's median chunk build, and its range.

    PYTHONPATH=. python3 -m lab.prefill_host.chunk_build --emulate-cuda --device cpu --dtype float32 \\
        --model synthetic:tiny-qwen3-28l --set n=2 --set prompt_tokens=4096 --set gen_tokens=2 \\
        --prefill-chunk 256 --rounds 3 --backend slab --slab-blocks 8
"""

from __future__ import annotations

import argparse
import statistics
import time

from lab.engine_rounds import add_round_arguments, load_for_rounds, run_round


class ChunkClock:
    """Patches ``Engine._prefill`` and ``mx.async_eval`` for the process: records each chunk's build time and
    evaluates the chunk synchronously."""

    def __init__(self, engine_cls, mx):
        self.builds: list[float] = []
        self._t0: float | None = None
        prefill = engine_cls._prefill

        def timed_eval(*arrays):
            if self._t0 is not None:
                self.builds.append((time.perf_counter() - self._t0) * 1e3)
                self._t0 = None
            mx.eval(*arrays)  # synchronous: the next build does not share the cores with this chunk's compute

        def timed_prefill(engine, plan):
            self._t0 = time.perf_counter()
            try:
                return prefill(engine, plan)
            finally:
                self._t0 = None

        mx.async_eval = timed_eval
        engine_cls._prefill = timed_prefill


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_arguments(parser)
    args = parser.parse_args()
    loaded = load_for_rounds(args)
    import mlx.core as mx

    from app.workloads.engine import Engine

    clock = ChunkClock(Engine, mx)
    medians = []
    for round_index in range(args.rounds + 1):  # round 0 warms up
        clock.builds.clear()
        run_round(loaded, args, backend=args.backend)
        if round_index and clock.builds:
            medians.append(statistics.median(clock.builds))
    if not medians:
        print(f"{args.backend}: no prefill chunk was built")
        return 1
    print(f"{args.backend} slab_blocks={args.slab_blocks}: chunk build ms, median over {len(medians)} rounds "
          f"{statistics.median(medians):.2f} [{min(medians):.2f}-{max(medians):.2f}] "
          f"({len(clock.builds)} chunks a round)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
