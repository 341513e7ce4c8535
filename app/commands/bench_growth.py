"""``slabscope bench growth``: successive pool-extending prefills per storage design (slab vs monolithic).

Each design runs in its own fresh Python process (MLX's memory counters are per process), prefilling N distinct
sequences of T tokens that all stay live, so every prefill extends the pool. Reported per design: growth events
(slab appends / grow-by-copy events, summed over layers), bytes copied by growth *measured* from MLX's allocator
(``bytes_copied``, pool/copy_meter.py) beside the bookkeeping's *model* (``bytes_copied_model``), live KV bytes,
max(active+cache) sampled in-process, MLX's peak counter (active only) and wall time. After the prefills, every
sequence is gathered once per layer, each gather measured the same way (``gather_bytes_copied``) beside the
bytes it returns (``gather_bytes_copied_model``: the one copy the design intends).

Sampling: a thread reads ``mx.get_active_memory() + mx.get_cache_memory()`` about every millisecond, and the pool
takes one extra sample after every layer's storage allocation and after every layer's write; the thread's cost is
included in ``wall_s`` (it is the same for both designs). mlx is imported only inside the worker.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from app.commands.arg_types import positive_int

DESIGN_NAMES = ("slab", "monolithic")
REQUIRED_KEYS = ("growth_events", "bytes_copied", "bytes_copied_model", "live_bytes", "max_active_plus_cache_bytes",
                 "mx_peak_bytes", "wall_s", "gather_bytes_copied", "gather_bytes_copied_model")
REPO_ROOT = Path(__file__).resolve().parents[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=positive_int, default=28, help="transformer layers (default 28)")
    parser.add_argument("--kv-heads", type=positive_int, default=8, help="KV heads (default 8)")
    parser.add_argument("--head-dim", type=positive_int, default=128, help="head dim (default 128)")
    parser.add_argument("--block-size", type=positive_int, default=32, help="tokens per block (default 32)")
    parser.add_argument("--slab-blocks", type=positive_int, default=32, help="blocks per slab (default 32)")
    parser.add_argument("--prefills", type=positive_int, default=8, help="successive distinct prefills (default 8)")
    parser.add_argument("--tokens", type=positive_int, default=1024,
                        help="tokens per prefill (default 1024; the issue's full size is 4096)")
    parser.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="bfloat16")
    parser.add_argument("--designs", default="slab,monolithic", help="comma-separated designs (slab,monolithic)")
    parser.add_argument("--sample-hz", type=float, default=1000.0, help="sampler thread rate (default 1000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object keyed by design")
    parser.add_argument("--worker", metavar="DESIGN", help=argparse.SUPPRESS)  # internal: run one design here


def main(args: argparse.Namespace) -> int:
    if args.worker:
        print(json.dumps(run_design(args, args.worker)))
        return 0
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    unknown = [d for d in designs if d not in DESIGN_NAMES]
    if unknown or not designs:
        print(f"unknown design(s) {unknown}; choose from {', '.join(DESIGN_NAMES)}", file=sys.stderr)
        return 2
    results = {}
    for design in designs:
        try:
            results[design] = _spawn(args, design)
        except RuntimeError as exc:
            print(str(exc), file=sys.stderr)
            return 1
    print(json.dumps(results, indent=2) if args.json else format_table(args, results))
    broken = {design: r["integrity"] for design, r in results.items() if r["integrity"] != "ok"}
    for design, problem in broken.items():
        print(f"bench growth: {design}: {problem}", file=sys.stderr)
    return 1 if broken else 0


def _spawn(args: argparse.Namespace, design: str) -> dict:
    """Run one design in a fresh interpreter; return its JSON result."""
    argv = [sys.executable, "-m", "app.commands.bench_growth", "--worker", design]
    for name in ("layers", "kv_heads", "head_dim", "block_size", "slab_blocks", "prefills", "tokens", "dtype",
                 "sample_hz"):
        argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(REPO_ROOT))
    if done.returncode != 0:
        raise RuntimeError(f"bench growth worker for {design!r} failed (exit {done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class _FootprintSampler:
    """max(active + cache) and max RSS, read by a background thread and on demand (``sample()``)."""

    def __init__(self, mx, hz: float) -> None:
        import psutil

        self._mx = mx
        self._process = psutil.Process()
        self._period = 1.0 / hz if hz > 0 else None
        self.max_footprint = 0
        self.max_rss = 0
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        footprint = self._mx.get_active_memory() + self._mx.get_cache_memory()
        if footprint > self.max_footprint:
            self.max_footprint = footprint
        self.count += 1

    def _loop(self) -> None:
        rss_every = 0
        while not self._stop.is_set():
            self.sample()
            rss_every += 1
            if rss_every % 20 == 0:  # RSS costs a /proc read: every 20th tick
                self.max_rss = max(self.max_rss, self._process.memory_info().rss)
            if self._period:
                time.sleep(self._period)

    def __enter__(self):
        if self._period:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.sample()
        self.max_rss = max(self.max_rss, self._process.memory_info().rss)


def run_design(args: argparse.Namespace, design: str) -> dict:
    """The measurement itself, in this process: N successive pool-extending prefills, all sequences live."""
    import mlx.core as mx

    from pool import PagedKVPool, PoolConfig
    from pool.copy_meter import peak_memory, reset_peak_memory
    from pool.storage_base import DTYPES

    pool = PagedKVPool(PoolConfig(num_layers=args.layers, block_size=args.block_size,
                                  slab_blocks=args.slab_blocks, design=design))
    shape = (args.tokens, args.kv_heads, args.head_dim)
    keys = mx.random.normal(shape).astype(DTYPES[args.dtype])
    values = mx.random.normal(shape).astype(DTYPES[args.dtype])
    mx.eval(keys, values)
    reset_peak_memory()
    baseline = mx.get_active_memory() + mx.get_cache_memory()
    sampler = _FootprintSampler(mx, args.sample_hz)
    sample_cost_us = _sample_cost_us(sampler)
    pool.on_storage_alloc(sampler.sample)
    start = time.perf_counter()
    with sampler:
        for seq in range(args.prefills):
            _prefill(mx, pool, seq, keys, values, sampler)
    wall = time.perf_counter() - start
    mx_peak = peak_memory()  # before the gathers: the growth phase's peak
    stats, counters = pool.stats(), pool.counters()
    gathered, gathered_model = _measure_gathers(pool)
    return {
        "integrity": _integrity(pool),
        "growth_events": counters.slab_appends if design == "slab" else counters.grow_events,
        "bytes_copied": counters.bytes_copied,
        "bytes_copied_model": counters.bytes_copied_model,
        "live_bytes": stats.bytes_in_use,
        "max_active_plus_cache_bytes": sampler.max_footprint,
        "mx_peak_bytes": mx_peak,
        "wall_s": round(wall, 4),
        "gather_bytes_copied": gathered,
        "gather_bytes_copied_model": gathered_model,
        "bytes_reserved": stats.bytes_reserved,
        "baseline_bytes": baseline,
        "max_rss_bytes": sampler.max_rss,
        "samples": sampler.count,
        "sample_cost_us": sample_cost_us,
        "device": str(mx.default_device()),
    }


def _sample_cost_us(sampler: _FootprintSampler, count: int = 2000) -> float:
    """Mean cost of one footprint sample (two MLX counter reads), measured before the run."""
    start = time.perf_counter()
    for _ in range(count):
        sampler.sample()
    sampler.count = 0
    return round((time.perf_counter() - start) / count * 1e6, 3)


def _integrity(pool) -> str:
    """"ok", or the broken invariant (a slab design that copied, say): reported beside the figures, not raised, so
    the figures that show the fault are still printed."""
    from pool import PoolError

    try:
        pool.check_integrity()
    except PoolError as exc:
        return str(exc)
    return "ok"


def _measure_gathers(pool) -> tuple[int, int]:
    """Gather every live sequence once per layer, each measured from the allocator (pool/copy_meter.py); returns
    (bytes allocated, bytes returned: K and V [H, tokens, D], the model of one intended copy)."""
    from pool.copy_meter import allocated_during

    measured = model = 0
    for seq in pool.sequence_ids():
        for layer in range(pool.config.num_layers):
            keys, values = pool.slabs(layer)
            got, allocated = allocated_during(lambda: list(pool.gather_visible(layer, seq)[:2]), [*keys, *values])
            measured += allocated
            model += sum(array.nbytes for array in got)
    return measured, model


def _prefill(mx, pool, seq: int, keys, values, sampler) -> None:
    """One pool-extending prefill: presize all layers in one step, then write and evaluate layer by layer (a
    sample after each layer)."""
    pool.add_sequence(seq)
    pool.prepare_write(seq, 0, keys.shape[0])
    slots = pool.write_slots([seq], [0], keys.shape[0])
    for layer in range(pool.config.num_layers):
        # A distinct array per layer, as a model's projections produce: MLX lets a slice update that covers a
        # whole slab alias its input's buffer, so writing one shared input into every layer would undercount.
        scale = 1.0 + (seq * pool.config.num_layers + layer) / 1024
        pool.write(layer, slots, keys[None] * scale, values[None] * scale)
        mx.eval(*[tensor for tensors in pool.slabs(layer) for tensor in tensors])
        sampler.sample()


def format_table(args: argparse.Namespace, results: dict) -> str:
    """Human-readable table with ratios to the live KV bytes."""
    mib = 1024 * 1024
    head = (f"bench growth: {args.prefills} x {args.tokens}-token prefills, {args.layers} layers, "
            f"{args.kv_heads} KV heads x {args.head_dim}, {args.dtype}, block {args.block_size}, "
            f"slab {args.slab_blocks} blocks")
    lines = [head, f"{'design':<11}{'growth':>8}{'copied MiB':>12}{'(model)':>9}{'live MiB':>10}"
                   f"{'max(act+cache)':>16}{'x live':>8}{'mx peak MiB':>13}{'x live':>8}{'wall s':>8}"
                   f"{'gather MiB':>12}{'(model)':>9}"]
    for design, r in results.items():
        live = r["live_bytes"] or 1
        footprint, peak = r["max_active_plus_cache_bytes"], r["mx_peak_bytes"]
        lines.append(f"{design:<11}{r['growth_events']:>8}{r['bytes_copied'] / mib:>12.1f}"
                     f"{r['bytes_copied_model'] / mib:>9.1f}"
                     f"{r['live_bytes'] / mib:>10.1f}{footprint / mib:>16.1f}{footprint / live:>8.2f}"
                     f"{peak / mib:>13.1f}{peak / live:>8.2f}{r['wall_s']:>8.2f}"
                     f"{r['gather_bytes_copied'] / mib:>12.1f}{r['gather_bytes_copied_model'] / mib:>9.1f}")
    first = next(iter(results.values()), {})
    cost_us = first.get("sample_cost_us", 0)
    lines.append("copied = bytes MLX allocated during growth beyond the capacity added (measured; '(model)': "
                 "the bookkeeping's arithmetic); gather = bytes allocated by one gather of every sequence in every "
                 "layer (measured; '(model)': the K/V bytes returned)")
    lines.append("growth = slab appends (slab) or grow-by-copy events (monolithic), summed over layers; "
                 f"max(act+cache) sampled at {args.sample_hz:g} Hz plus after every layer allocation/write "
                 f"({first.get('samples', 0)} samples at {cost_us:.1f} us each: "
                 f"{cost_us * args.sample_hz / 1e4:.1f}% of one core); baseline before the pool "
                 f"{first.get('baseline_bytes', 0) / mib:.1f} MiB (the prefill inputs) is included; "
                 f"device {first.get('device', '?')}")
    return "\n".join(lines)


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="slabscope bench growth")
    add_arguments(_parser)
    raise SystemExit(main(_parser.parse_args()))
