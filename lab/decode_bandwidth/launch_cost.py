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

from lab.decode_bandwidth.host_split import table_cell, time_calls


def calls(args, mx):
    """{name: zero-argument call} for the launches above, on one cell's pool (bf16, qwen3-0.6b's attention)."""
    cell = table_cell(args.batch, args.context, "bfloat16", mx)
    launch, plan, q, meta, table = cell.launch, cell.plan, cell.q, cell.meta, cell.table
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
            "sdpa": lambda: mx.fast.scaled_dot_product_attention(q, cell.k, cell.v, scale=cell.scale)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--context", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import mlx.core as mx

    time_calls(calls(args, mx), mx, rounds=args.rounds, title="call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
