"""What a B=1 fused decode call's kernel launches cost the host on the H200, one by one: the split pass alone, the
merge pass alone, both (what the table route launches), the split pass with ``init_value=0.0`` (MLX zeroes every
output first: what a one-launch design with an arrival count zeroed by MLX would add), and MLX's contiguous SDPA on
the same K/V. Per call, over interleaved rounds: host microseconds to build the call (no evaluation) and wall
microseconds in `bench decode`'s loop (async_eval each call, one eval per 10); the binaries' sizes.

At 6446b7a this module compared that commit's one-launch design (the split pass merging its own splits) with the two
launches instead (docs/gpu.md, "The fixed cost of a B=1 call").

    PYTHONPATH=. python3 -m lab.decode_bandwidth.launch_cost [--batch 1] [--context 16384] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace


def _span(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def calls(args, mx):
    """{name: zero-argument call} for the launches above, on one cell's pool (bf16, qwen3-0.6b's attention)."""
    from app.commands.bench_decode import _cell_inputs
    from pool.kernels.paged_decode import fused_decode, plan_for_pool, table_kernel
    from pool.kernels.slab_table import slab_tables

    cell_args = SimpleNamespace(n_kv_heads=8, head_dim=128, dtype="bfloat16", layout="multi", block_size=32,
                                slab_blocks=32, n_q_heads=16)
    pool, ids, q, k, v = _cell_inputs(cell_args, mx, args.batch, args.context, 1)[0]
    scale = 128 ** -0.5
    plan = plan_for_pool(pool, ids, scale=scale)
    meta = mx.array(plan.meta)
    kernel = table_kernel("cuda")
    keys, values = pool.slabs(0)
    launch = kernel.prepare(q, keys, values, plan, meta)
    mx.eval(fused_decode(pool, 0, ids, q, scale=scale, backend="cuda", plan=plan, meta=meta))
    table = slab_tables(pool.storage, kernel.name, None).table(pool.storage, 0)
    if launch.direct:
        raise SystemExit(f"B={args.batch} x {args.context} plans one split: no merge pass to time")
    first, merge = launch.first, launch.merge
    common = dict(output_shapes=launch.out_shapes, output_dtypes=launch.out_dtypes, scalars=[], grid=launch.grid,
                  threadgroup=(launch.threads, 1, 1), ensure_row_contiguous=True)

    def split(init=None):
        return mx.fast.precompiled_cuda_kernel(name=first[0], compiled_source=first[1], inputs=[q, meta, table],
                                               init_value=init, **common)

    parts = split()
    mx.eval(parts)

    def merge_only():
        return mx.fast.precompiled_cuda_kernel(name=merge[0], compiled_source=merge[1], inputs=list(parts),
                                               output_shapes=[tuple(q.shape)], output_dtypes=[q.dtype],
                                               scalars=[plan.num_splits], grid=launch.merge_grid,
                                               threadgroup=(launch.head_dim, 1, 1), ensure_row_contiguous=True)

    print(f"B={args.batch} context={args.context}: {plan.num_splits} splits; binaries: split {len(first[1]):,} "
          f"bytes, merge {len(merge[1]):,} bytes")
    return {"split": split, "merge": merge_only, "split+merge": lambda: launch(q, table),
            "split init0": lambda: split(0.0),
            "sdpa": lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)}


def build_us(fn, mx, n: int) -> float:
    """Median host microseconds to build one call (evaluated afterwards, outside the timing)."""
    times, outs = [], []
    for _ in range(n):
        start = time.perf_counter()
        outs.append(fn())
        times.append((time.perf_counter() - start) * 1e6)
    mx.eval(outs)
    return statistics.median(times)


def wall_us(fn, mx, inner: int = 10) -> float:
    """Wall microseconds per call, `bench decode`'s loop."""
    start = time.perf_counter()
    out = None
    for _ in range(inner):
        out = fn()
        mx.async_eval(out)
    mx.eval(out)
    return (time.perf_counter() - start) / inner * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--context", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import mlx.core as mx

    fns = calls(args, mx)
    for fn in fns.values():
        mx.eval(fn())
    builds: dict = {name: [] for name in fns}
    walls: dict = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            builds[name].append(build_us(fn, mx, 50))
            walls[name].append(statistics.median(wall_us(fn, mx) for _ in range(9)))
    print("| call | build us (host, no eval) | wall us per call |\n|---|---:|---:|")
    for name in fns:
        print(f"| {name} | {_span(builds[name])} | {_span(walls[name])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
