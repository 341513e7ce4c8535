"""Where a B=1 fused decode call's fixed ~57 us goes (issue 25: within 1.2x of MLX's contiguous SDPA at B=1), on the
H200: per call, the host time to build the call's graph (no evaluation) and the wall time per call in `bench
decode`'s loop (async_eval per call, one eval per ``--inner`` calls), for

* ``fused``: the live table route (`fused_decode`: table refresh check, the prepared launch, split + merge passes);
* ``launch``: the prepared launch alone on a ready table (two precompiled kernels: split and merge);
* ``direct``: the same launch planned with one split (one kernel, no merge; other GPU work: 8 blocks);
* ``sdpa``: `mx.fast.scaled_dot_product_attention` on contiguous K/V.

Rounds interleave the methods; printed: median [range] over rounds of each round's median.

    PYTHONPATH=. python3 -m lab.decode_bandwidth.host_split [--batch 1] [--context 16384] [--rounds 5]

``--emulate-cuda`` runs it on a CPU (app/bench/host_emulation.py: float32, MLX's kernel call replaced by zero-filled
outputs): only the build column means anything there, and only for our Python (the ``fused`` - ``launch``
difference); ``sdpa`` and the walls are the CPU's. An emulation, and said so in its output.
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace


def _span(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def table_cell(batch: int, context: int, dtype: str, mx) -> SimpleNamespace:
    """One `bench decode` cell on the table route (16 query heads on 8 KV heads, head_dim 128, blocks of 32 tokens,
    32 blocks a slab), its default plan, prepared launch and layer 0's slab table, after one fused call: pool, ids,
    q, k, v (contiguous K/V for SDPA), scale, plan, meta, kernel, launch, launches, table. Shared with launch_cost.py."""
    from app.commands.bench_decode import _cell_inputs
    from pool.kernels.paged_decode import fused_decode, plan_for_pool, table_kernel
    from pool.kernels.slab_table import slab_tables

    cell_args = SimpleNamespace(n_kv_heads=8, head_dim=128, dtype=dtype, layout="multi", block_size=32,
                                slab_blocks=32, n_q_heads=16)
    pool, ids, q, k, v = _cell_inputs(cell_args, mx, batch, context, 1)[0]
    scale = 128 ** -0.5
    plan = plan_for_pool(pool, ids, scale=scale)
    meta = mx.array(plan.meta)
    kernel = table_kernel("cuda")
    keys, values = pool.slabs(0)
    launch = kernel.prepare(q, keys, values, plan, meta)
    launches: dict = {}
    mx.eval(fused_decode(pool, 0, ids, q, scale=scale, backend="cuda", plan=plan, meta=meta, launches=launches))
    table = slab_tables(pool.storage, kernel.name, lambda: kernel.writer(dtype)).table(pool.storage, 0)
    return SimpleNamespace(pool=pool, ids=ids, q=q, k=k, v=v, scale=scale, plan=plan, meta=meta, kernel=kernel,
                           launch=launch, launches=launches, table=table)


def methods(args, mx):
    from pool.kernels.paged_decode import fused_decode, plan_for_pool

    cell = table_cell(args.batch, args.context, "float32" if args.emulate_cuda else "bfloat16", mx)
    pool, ids, q, scale = cell.pool, cell.ids, cell.q, cell.scale
    one = plan_for_pool(pool, ids, scale=scale, num_splits=1)
    keys, values = pool.slabs(0)
    direct = cell.kernel.prepare(q, keys, values, one, mx.array(one.meta))
    print(f"B={args.batch} context={args.context}: {cell.plan.num_splits} splits, {pool.num_slabs()} slabs"
          + (" (CPU emulation of the CUDA route: build column only)" if args.emulate_cuda else ""))
    return {
        "fused": lambda: fused_decode(pool, 0, ids, q, scale=scale, backend="cuda", plan=cell.plan, meta=cell.meta,
                                      launches=cell.launches),
        "launch": lambda: cell.launch(q, cell.table),
        "direct": lambda: direct(q, cell.table),
        "sdpa": lambda: mx.fast.scaled_dot_product_attention(q, cell.k, cell.v, scale=scale),
    }


def build_us(fn, mx, calls: int) -> float:
    """Median host microseconds to build one call's graph (evaluated afterwards, outside the timing)."""
    times, outs = [], []
    for _ in range(calls):
        start = time.perf_counter()
        outs.append(fn())
        times.append((time.perf_counter() - start) * 1e6)
    mx.eval(outs)
    return statistics.median(times)


def wall_us(fn, mx, inner: int) -> float:
    """Wall microseconds per call, `bench decode`'s loop (async_eval each call, eval at the end)."""
    start = time.perf_counter()
    out = None
    for _ in range(inner):
        out = fn()
        mx.async_eval(out)
    mx.eval(out)
    return (time.perf_counter() - start) / inner * 1e6


def time_calls(fns: dict, mx, *, rounds: int, calls: int = 50, inner: int = 10, title: str = "method") -> None:
    """Warm each call up, then ``rounds`` interleaved rounds of (build_us over ``calls``, the median of 9 wall_us
    over ``inner``) per call; prints the markdown table of median [range] over rounds. Shared with launch_cost.py."""
    for fn in fns.values():  # warm-up: kernels loaded, buffers cached
        for _ in range(3):
            mx.eval(fn())
    builds: dict = {name: [] for name in fns}
    walls: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            builds[name].append(build_us(fn, mx, calls))
            walls[name].append(statistics.median(wall_us(fn, mx, inner) for _ in range(9)))
    print(f"| {title} | build us (host, no eval) | wall us per call |\n|---|---:|---:|")
    for name in fns:
        print(f"| {name} | {_span(builds[name])} | {_span(walls[name])} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--context", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--inner", type=int, default=10)
    parser.add_argument("--emulate-cuda", action="store_true", help="the CUDA route's host side on a CPU")
    args = parser.parse_args()
    if args.emulate_cuda:
        from app.bench.host_emulation import install
        from app.models.blas import enable_openblas

        enable_openblas()
        install("float32", 128)
    import mlx.core as mx

    time_calls(methods(args, mx), mx, rounds=args.rounds, calls=args.calls, inner=args.inner)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
