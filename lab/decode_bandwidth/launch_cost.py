"""The table route's split decode as one launch that merges its own splits against the two launches it replaced
(the split pass, then the merge pass), in one process on the H200: per call, the host microseconds to build it (no
evaluation) and the wall microseconds in `bench decode`'s loop (async_eval each call, one eval per 10), beside
MLX's contiguous SDPA on the same K/V. Both designs run the same first-pass body; their outputs are compared bit
for bit once.

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
    from app.commands.bench_decode import _cell_inputs
    from pool.kernels.paged_decode import fused_decode, plan_for_pool, table_kernel
    from pool.kernels.paged_decode_cuda import kernel_geometry, unroll_for
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
    geometry = kernel_geometry("bfloat16", 128, 16, 8, 32, unroll_for(32, 128, plan.tuning.unroll))
    _, split_variant, merge_variant = geometry.variants(0)
    split, merge = launch.builds.binary(split_variant), launch.builds.binary(merge_variant)

    def two_launches():
        parts = mx.fast.precompiled_cuda_kernel(
            name=split[0], compiled_source=split[1], inputs=[q, meta, table], output_shapes=launch.out_shapes[:2],
            output_dtypes=launch.out_dtypes[:2], scalars=[], grid=launch.grid, threadgroup=(launch.threads, 1, 1),
            ensure_row_contiguous=True)
        return mx.fast.precompiled_cuda_kernel(
            name=merge[0], compiled_source=merge[1], inputs=list(parts), output_shapes=[tuple(q.shape)],
            output_dtypes=[q.dtype], scalars=[plan.num_splits], grid=(128, 16, args.batch), threadgroup=(128, 1, 1),
            ensure_row_contiguous=True)[0]

    same = mx.array_equal(launch(q, table), two_launches()).item()
    print(f"B={args.batch} context={args.context}: {plan.num_splits} splits; binaries: merged "
          f"{len(launch.first[1]):,} bytes, split {len(split[1]):,} + merge {len(merge[1]):,}; "
          f"outputs bit-identical: {same}")
    return {"one launch (merged)": lambda: launch(q, table), "two launches (split, merge)": two_launches,
            "sdpa": lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)}


def build_us(fn, mx, n: int) -> float:
    times, outs = [], []
    for _ in range(n):
        start = time.perf_counter()
        outs.append(fn())
        times.append((time.perf_counter() - start) * 1e6)
    mx.eval(outs)
    return statistics.median(times)


def wall_us(fn, mx, inner: int = 10) -> float:
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
