"""Host time of a fused decode step's attention side at few vs many slabs, per route, on any machine.

What changed in issue 25 is the launch's host side: the per-slab route hands MLX every slab of the layer as an input
(and a kernel variant per slab-count bucket), the table route three inputs plus a table update over the slabs
written this step. This times exactly that part of a decode step: for each of ``--layers`` layers, the step's token
write into the pool (every sequence) and ``fused_decode`` (the table refresh and the launch), with one plan and one
launch dict per step as the live path shares them. On a CPU the kernels are the emulation's zero-filled outputs
(app/bench/host_emulation.py: MLX's own per-input cost on a GPU is not in these figures, only our Python and MLX's
CPU-side op creation); on the H200 pass ``--gpu`` to launch the real kernels (timing still stops before evaluation).

Rounds interleave the (route, slabs) cells after a warm-up; each round's figure is the median over ``--steps``
steps; printed: the median and range over rounds, in microseconds per step.

    PYTHONPATH=. python3 -m lab.decode_any_slabs.host_launch [--gpu] [--rounds 5] [--steps 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def build(slab_blocks: int, args, dtype):
    import mlx.core as mx

    from pool import PagedKVPool, PoolConfig

    pool = PagedKVPool(PoolConfig(num_layers=args.layers, block_size=16, slab_blocks=slab_blocks))
    kv = mx.zeros((1, args.context, args.kv_heads, args.head_dim), dtype=dtype)
    for seq_id in range(args.batch):
        pool.add_sequence(seq_id)
        pool.prepare_write(seq_id, 0, args.context)
        slots = pool.write_slots([seq_id], [0], args.context)
        for layer in range(args.layers):
            pool.write(layer, slots, kv, kv)
        mx.eval(pool.storage.tensors())
    return pool, [args.context] * args.batch


def step(pool, lengths, args, dtype) -> float:
    """One decode step's writes and fused attention over every layer; returns the host seconds spent building it
    (the evaluation that follows is not timed)."""
    import mlx.core as mx

    from pool.kernels.paged_decode import fused_decode, plan_for_pool

    ids = list(range(args.batch))
    start = time.perf_counter()
    for seq_id, n in zip(ids, lengths):
        pool.prepare_write(seq_id, n, 1)
    slots = pool.write_slots(ids, lengths, 1)
    plan, launches, outs = plan_for_pool(pool, ids, scale=0.125), {}, []
    kv = mx.zeros((args.batch, 1, args.kv_heads, args.head_dim), dtype=dtype)
    q = mx.zeros((args.batch, args.q_heads, 1, args.head_dim), dtype=dtype)
    for layer in range(args.layers):
        pool.write(layer, slots, kv, kv)
        outs.append(fused_decode(pool, layer, ids, q, scale=0.125, backend="cuda", plan=plan, launches=launches))
    elapsed = time.perf_counter() - start
    mx.eval(outs, pool.storage.tensors())
    for i in range(len(lengths)):
        lengths[i] += 1
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="real kernels on a CUDA device (else the CPU emulation)")
    parser.add_argument("--slab-blocks", default="8,32,128", help="rows per slab, comma-separated")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--q-heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    if not args.gpu:
        from app.models.blas import enable_openblas

        enable_openblas()
    import mlx.core as mx

    if not args.gpu:
        from app.bench.host_emulation import install

        install("float32", args.head_dim)
    dtype = mx.bfloat16 if args.gpu else mx.float32
    sizes = [int(s) for s in args.slab_blocks.split(",")]
    cells = {(route, sb): build(sb, args, dtype) for sb in sizes for route in ("0", "1")}
    results = {cell: [] for cell in cells}
    for round_ in range(args.rounds + 1):  # round 0: warm-up (variants, first tables), not counted
        for (route, sb), (pool, lengths) in cells.items():
            os.environ["SLABSCOPE_SLAB_TABLE"] = route
            times = [step(pool, lengths, args, dtype) for _ in range(args.steps)]
            if round_:
                results[(route, sb)].append(statistics.median(times) * 1e6)
    print(f"{'cuda' if args.gpu else 'CPU emulation'}: {args.layers} layers, B={args.batch}, context "
          f"{args.context}, {args.q_heads}/{args.kv_heads} heads, head_dim {args.head_dim}; host us per step "
          f"(writes + attention launches), median [range] of {args.rounds} interleaved rounds of {args.steps} steps")
    for (route, sb), (pool, _) in cells.items():
        r = results[(route, sb)]
        name = "slab table" if route == "1" else "per-slab inputs"
        print(f"  --slab-blocks {sb:4d} ({pool.num_slabs():4d} slabs)  {name:16s} {statistics.median(r):9.0f} "
              f"[{min(r):.0f}-{max(r):.0f}]  per layer {statistics.median(r) / args.layers:7.1f}")


if __name__ == "__main__":
    main()
