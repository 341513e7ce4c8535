"""Where a batched prefill chunk's time goes, slab against dense, on the burst (or ``--set`` overrides): interleaved
warm rounds of variants in one process, each round's prefill time (the engine's own Step clocks, pipelined as in a
run) and cache trims, then per chunk start the host build and the device time measured with each chunk evaluated
alone (``--sync``). Variants take parts out of the slab step to price them (their logits are wrong; only the clocks
mean something): ``slab-nogather`` (the history read replaced by zeros), ``slab-nowrite`` (no slab writes),
``slab-notrim`` (no cache trims, as ``dense-notrim``); ``*-chunkstart`` sends a chunk to the device at its end only,
not layer by layer as the engine does (app/workloads/layer_starts.py; logits unchanged); ``*-bound-freestart`` starts
the layers outside the in-flight bound (only the chunk's final start under it).
``slab-bound`` / ``dense-bound`` run under the prefill
in-flight bound (``--inflight``, app/workloads/inflight_bound.py), ``*-bound-notrim`` with no trims besides; the
other variants run unbounded. Every round prints MLX's peak active memory and the footprint.

    PYTHONPATH=. python3 -m lab.batched_prefill.anatomy --rounds 3 --variants dense,slab,slab-notrim,slab-nogather
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

from app.commands.arg_types import byte_size
from lab.engine_rounds import add_round_arguments, load_for_rounds, spread

VARIANTS = ("dense", "slab", "monolithic", "slab-notrim", "dense-notrim", "slab-nogather", "slab-nowrite",
            "slab-bound", "dense-bound", "slab-bound-notrim", "dense-bound-notrim", "slab-chunkstart",
            "dense-chunkstart", "slab-bound-chunkstart", "dense-bound-chunkstart", "slab-bound-freestart",
            "dense-bound-freestart")


def patch_parts(variant: str):
    """Install the variant's lab-only patches on the pool; returns a function that removes them."""
    import mlx.core as mx

    from pool.pool import GatherResult, PagedKVPool

    saved = {name: getattr(PagedKVPool, name) for name in ("gather_batch", "write")}
    if variant.endswith("nogather"):
        def gather_batch(pool, layer, seq_ids, phase="prefill"):
            table = pool.book.table(seq_ids[0])
            g = pool.storage.geometry
            from pool.storage_base import DTYPES
            zeros = mx.zeros((len(seq_ids), g.n_kv_heads, table.length, g.head_dim), dtype=DTYPES[g.dtype])
            return GatherResult(zeros, zeros, 1)
        PagedKVPool.gather_batch = gather_batch
    if variant.endswith("nowrite"):
        write = saved["write"]

        def first_write_only(pool, layer, slots, keys, values, through_table=False):
            if not pool.storage.initialised:  # the first write sizes the storage; the rest are priced out
                write(pool, layer, slots, keys, values, through_table=through_table)
        PagedKVPool.write = first_write_only

    parts = variant.split("-")
    undo_starts = chunk_starts_only() if "chunkstart" in parts else free_starts() if "freestart" in parts else (
        lambda: None)

    def undo():
        for name, value in saved.items():
            setattr(PagedKVPool, name, value)
        undo_starts()
    return undo


def chunk_starts_only():
    """``*-chunkstart``: the chunk goes to the device at its end only (``SLABSCOPE_PREFILL_LAYER_STARTS=0``), as
    before layer starts (app/workloads/layer_starts.py). Returns the undo."""
    import os

    from app.workloads.layer_starts import ENV_VAR

    saved = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = "0"

    def undo():
        if saved is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = saved
    return undo


def free_starts():
    """``*-freestart``: layer starts outside the in-flight bound (the engine's ``_layer_gate`` says none).
    Returns the undo."""
    from app.workloads.engine import Engine

    saved = Engine._layer_gate
    Engine._layer_gate = lambda engine: None

    def undo():
        Engine._layer_gate = saved
    return undo


class SyncChunks:
    """With ``on``, evaluates every ``mx.async_eval`` inside a prefill chunk at once and records (start, build ms,
    device ms) per chunk: device = the time those evaluations took, build = the rest of the chunk's time."""

    def __init__(self, engine_cls, mx):
        self.on = False
        self.rows: list[tuple[int, float, float]] = []
        self._device: float | None = None
        prefill, async_eval = engine_cls._prefill, mx.async_eval

        def timed_eval(*arrays):
            if not (self.on and self._device is not None):
                return async_eval(*arrays)
            t1 = time.perf_counter()
            mx.eval(*arrays)
            self._device += time.perf_counter() - t1

        def timed_prefill(engine, plan):
            if not self.on:
                return prefill(engine, plan)
            self._device, t0 = 0.0, time.perf_counter()
            try:
                return prefill(engine, plan)
            finally:
                total = time.perf_counter() - t0
                self.rows.append((plan.start, (total - self._device) * 1e3, self._device * 1e3))
                self._device = None

        mx.async_eval = timed_eval
        engine_cls._prefill = timed_prefill


def one_round(loaded, args, variant: str) -> dict:
    """One run of the variant: prefill seconds (sum of prefill Step clocks), prompt tokens, trims."""
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec
    from lab.engine_rounds import burst_overrides

    backend = variant.split("-")[0]
    import mlx.core as mx

    prefill_s, tokens, cache = [], [0], [0]

    def emit(event):
        if type(event).__name__ == "Step" and event.type == "prefill":
            prefill_s.append(event.wall_s)
            tokens[0] += event.num_tokens
            cache[0] = max(cache[0], mx.get_cache_memory())

    undo = patch_parts(variant)
    try:
        spec = RunSpec(scenario="distinct_burst", model=loaded.name, dtype=args.dtype, device=args.device,
                       overrides=burst_overrides(args.set), slab_blocks=args.slab_blocks,
                       prefill_chunk=args.prefill_chunk, prefill_batch_tokens=args.prefill_batch_tokens,
                       backend=backend, prefill_trim=None if "notrim" in variant.split("-") else 0.05,
                       prefill_inflight=args.inflight if "bound" in variant.split("-") else None)
        from pool.copy_meter import reset_peak_memory

        reset_peak_memory()
        summary = run_workload(spec, emit, loaded=loaded)
    finally:
        undo()
    trims = (summary.get("cache_trim") or {}).get("trims")
    return {"prefill_s": sum(prefill_s), "tokens": tokens[0], "chunks": len(prefill_s), "trims": trims,
            "cache_mib": cache[0] / 2**20, "peak_active_mib": summary["footprint"]["mlx_peak_bytes"] / 2**20,
            "footprint_mib": summary["footprint"]["max_footprint_bytes"] / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_arguments(parser)
    parser.add_argument("--variants", default="dense,slab,slab-notrim,slab-nogather,slab-nowrite")
    parser.add_argument("--sync", action="store_true", help="also a round per variant with each chunk evaluated alone")
    parser.add_argument("--inflight", type=byte_size, default=2**30, metavar="BYTES",
                        help="the *-bound variants' prefill in-flight allowance (default 1G)")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    loaded = load_for_rounds(args)
    import mlx.core as mx

    from app.workloads.engine import Engine

    clock = SyncChunks(Engine, mx)
    rates, peaks, footprints = (collections.defaultdict(list) for _ in range(3))
    for round_index in range(args.rounds + 1):  # round 0 warms up
        for variant in variants:
            row = one_round(loaded, args, variant)
            print(f"round {round_index} {variant}: {row['tokens'] / row['prefill_s']:.0f} prefill tok/s, "
                  f"{row['chunks']} chunks, trims {row['trims']}, cache max {row['cache_mib']:.0f} MiB, peak active "
                  f"{row['peak_active_mib']:.0f} MiB, footprint {row['footprint_mib']:.0f} MiB", flush=True)
            if round_index:
                rates[variant].append(row["tokens"] / row["prefill_s"])
                peaks[variant].append(row["peak_active_mib"])
                footprints[variant].append(row["footprint_mib"])
    for variant in variants:
        print(f"{variant:>14}: prefill tok/s {spread(rates[variant], '.0f')}; peak active MiB "
              f"{spread(peaks[variant], '.0f')}; footprint MiB {spread(footprints[variant], '.0f')}")
    if args.sync:
        for variant in variants:
            clock.rows.clear()
            clock.on = True
            one_round(loaded, args, variant)
            clock.on = False
            by_start = collections.defaultdict(list)
            for start, build, device in clock.rows:
                by_start[start].append((build, device))
            cells = [f"{start}: {statistics.median(b for b, _ in v):.1f}+{statistics.median(d for _, d in v):.1f}"
                     for start, v in sorted(by_start.items())]
            print(f"{variant:>14} sync build+device ms by chunk start: " + "  ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
