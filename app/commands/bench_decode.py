"""``slabscope bench decode``: one decode step's attention for one layer, three ways, over a batch x context grid.

* gather: the pool's gather path (``pool.gather_visible`` per sequence: one read per same-slab run, concatenated)
  then one batched ``mx.fast.scaled_dot_product_attention``; what the slab backend does without a kernel.
* fused: the fused paged-decode kernel reading the slabs in place (``pool/kernels``); its launch plan (block
  tables -> int32 meta array) is made once per step for all layers, so it is timed separately (``plan_us``).
* sdpa: ``mx.fast.scaled_dot_product_attention`` on dense contiguous K/V laid out like mlx-lm's ``KVCache``
  (capacity in steps of 256, sliced to the context): the dense baseline's cost, the floor to match.

Timing: every method is warmed up (JIT compiles, cuDNN plans) before timing; each sample launches ``--inner``
steps back to back (``mx.async_eval``) and synchronises once; samples of the three methods alternate; the figure is
the median over ``--repeats`` samples, in microseconds per step (wall time: Python dispatch included). Input sets
rotate so that repeated steps do not read K/V from the GPU's L2 cache (a real step reads a different layer's K/V
each time). ``--write-thresholds`` stores the measured decision thresholds (``pool/kernels/thresholds.json``) that
the fused-decision rule uses.

The kernel's tuning knobs are flags: ``--unroll``, ``--target-blocks`` and ``--min-chunk-tokens`` make every plan of
the run with that ``pool.kernels.tuning.KernelTuning`` (each defaults to the kernel's own default), and the JSON
records them as ``kernel``; ``lab/kernel_tuning/`` runs the grid of variants. mlx and the pool are imported only
inside ``main``, so building the parser stays light.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from app.commands.outputs import add_force_argument
from probes.outfile import check_target, write_atomically

L2_ROTATION_BYTES = 256 * 2**20   # rotate input sets until this many K/V bytes are in play (H200 L2: 60 MB)
MAX_SETS = 8
DENSE_STEP = 256                  # mlx-lm KVCache grows its buffers in steps of 256 tokens


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batches", type=_ints, default=[1, 2, 4, 8, 16, 32], help="comma-separated batch sizes")
    parser.add_argument("--contexts", type=_ints, default=[128, 512, 1024, 2048, 4096, 8192, 16384],
                        help="comma-separated context lengths (tokens per sequence)")
    parser.add_argument("--n-q-heads", type=int, default=16)
    parser.add_argument("--n-kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--slab-blocks", type=int, default=32)
    parser.add_argument("--layout", default="multi", choices=["single", "multi", "fragmented"],
                        help="block-table layout of the pool (pool/kernels/workbench.py)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--inner", type=int, default=10, help="steps per timed sample")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--out", default=None, help="also write the JSON result to this file (a new file unless "
                        "--force)")
    add_force_argument(parser, "the --out file")
    parser.add_argument("--write-thresholds", nargs="?", const="", default=None, metavar="PATH",
                        help="store the measured thresholds (default pool/kernels/thresholds.json)")
    knobs = parser.add_argument_group("kernel tuning (pool/kernels/tuning.py; default: the kernel's own defaults)")
    knobs.add_argument("--unroll", type=int, default=None, help="warp steps of K/V loads in flight (1, 2, 4, 8, 16)")
    knobs.add_argument("--target-blocks", type=int, default=None,
                       help="thread blocks wanted per launch (the plan splits contexts to reach it)")
    knobs.add_argument("--min-chunk-tokens", type=int, default=None, help="shortest context split")


def kernel_tuning(args):
    """The ``KernelTuning`` of the flags (the defaults for the ones not given); UsageError (one line) for a value no
    kernel can run."""
    from app.commands.errors import UsageError
    from pool.kernels.tuning import KernelTuning

    given = {name: value for name in ("unroll", "target_blocks", "min_chunk_tokens")
             if (value := getattr(args, name, None)) is not None}
    try:
        return KernelTuning(**given)
    except ValueError as exc:
        raise UsageError(f"decode: {exc}") from None


def _time_methods(fns: dict, mx, sets: int, warmup: int, repeats: int, inner: int) -> dict:
    """Median microseconds per call of each ``fn(i)`` (i = input set), after warm-up. Samples of the methods
    alternate (A B C A B C ...), so clock or thermal drift affects them alike."""
    for fn in fns.values():
        for i in range(max(warmup, sets)):
            mx.eval(fn(i % sets))
    samples: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            out = None
            for i in range(inner):
                out = fn(i % sets)
                mx.async_eval(out)
            mx.eval(out)
            samples[name].append((time.perf_counter() - start) / inner * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def _cell_inputs(args, mx, batch: int, context: int, sets: int):
    """Per input set: (pool, seq_ids, queries, dense_k, dense_v), same values in pool and dense arrays."""
    from pool.kernels.workbench import fill_pool, random_queries

    cells = []
    capacity = -(-context // DENSE_STEP) * DENSE_STEP
    for s in range(sets):
        pool, ids = fill_pool([context] * batch, n_kv_heads=args.n_kv_heads, head_dim=args.head_dim,
                              dtype=args.dtype, layout=args.layout, block_size=args.block_size,
                              slab_blocks=args.slab_blocks, seed=s)
        queries = random_queries(batch, args.n_q_heads, args.head_dim, args.dtype, seed=100 + s)
        dense = []
        for tensors in ("keys", "values"):
            buf = mx.zeros((batch, args.n_kv_heads, capacity, args.head_dim), dtype=getattr(mx, args.dtype))
            buf[:, :, :context, :] = mx.stack([getattr(pool.gather_visible(0, i), tensors) for i in ids])
            mx.eval(buf)
            dense.append(buf)
        cells.append((pool, ids, queries, dense[0][:, :, :context, :], dense[1][:, :, :context, :]))
    return cells


def measure_cell(args, mx, backend: str, batch: int, context: int, tuning) -> dict:
    """Time gather / fused / sdpa for one (batch, context), the fused kernel planned with ``tuning``; also checks
    fused against sdpa once."""
    from pool.kernels.paged_decode import fused_decode, gather_decode, kernel_for_backend, plan_for_pool, table_kernel

    kv_bytes = 2 * batch * context * args.n_kv_heads * args.head_dim * getattr(mx, args.dtype).size
    sets = max(1, min(MAX_SETS, math.ceil(L2_ROTATION_BYTES / kv_bytes)))
    cells = _cell_inputs(args, mx, batch, context, sets)
    scale = args.head_dim ** -0.5
    plans = [plan_for_pool(pool, ids, scale=scale, tuning=tuning) for pool, ids, *_ in cells]
    metas = [mx.array(p.meta) for p in plans]
    timing = dict(sets=sets, warmup=args.warmup, repeats=args.repeats, inner=args.inner)

    def gather(i):
        pool, ids, q, _, _ = cells[i]
        return gather_decode(pool, 0, ids, q, scale=scale)

    kernel = kernel_for_backend(backend)
    launches = [{} for _ in cells]  # one prepared launch per cell, as a decode step's layers share one
    table = table_kernel(backend) is not None

    def fused(i):
        pool, ids, q, _, _ = cells[i]
        if table:  # the live route: the layer's slab table (no write between samples: no table update runs)
            return fused_decode(pool, 0, ids, q, scale=scale, backend=backend, plan=plans[i], meta=metas[i],
                                launches=launches[i])
        keys, values = pool.slabs(0)
        return kernel(q, keys, values, plans[i], meta=metas[i])

    def sdpa(i):
        _, _, q, k, v = cells[i]
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)

    result = {"batch": batch, "context": context, "kv_bytes": kv_bytes, "slabs": cells[0][0].num_slabs(),
              "route": "slab table" if table else "per-slab inputs",
              "splits": plans[0].num_splits}
    medians = _time_methods({"gather": gather, "fused": fused, "sdpa": sdpa}, mx, **timing)
    result.update({f"{name}_us": value for name, value in medians.items()})
    start = time.perf_counter()
    for _ in range(20):
        plan_for_pool(cells[0][0], cells[0][1], scale=scale, tuning=tuning)
    result["plan_us"] = (time.perf_counter() - start) / 20 * 1e6
    check = fused_decode(cells[0][0], 0, cells[0][1], cells[0][2], scale=scale, backend=backend, plan=plans[0])
    ref = sdpa(0)
    err = mx.max(mx.abs(check.astype(mx.float32) - ref.astype(mx.float32))) / mx.max(mx.abs(ref.astype(mx.float32)))
    result["fused_vs_sdpa_rel_err"] = float(err.item())
    result["gbps_fused"] = kv_bytes / result["fused_us"] / 1e3
    result["gbps_sdpa"] = kv_bytes / result["sdpa_us"] / 1e3
    del cells
    mx.clear_cache()
    return result


def derive_thresholds(rows: list[dict]) -> dict:
    """The rectangle {batch >= b0, context >= c0} of grid cells in which fused beat gather in every cell,
    covering the most cells (ties: smaller b0, then smaller c0). Thresholds at the grid's smallest value
    become 1 / 0 (fused everywhere measured, down to the smallest size). ``fused_wins`` False if none."""
    batches = sorted({r["batch"] for r in rows})
    contexts = sorted({r["context"] for r in rows})
    wins = {(r["batch"], r["context"]): r["fused_us"] < r["gather_us"] for r in rows}
    best = None
    for b0 in batches:
        for c0 in contexts:
            cells = [(b, c) for b in batches for c in contexts if b >= b0 and c >= c0 and (b, c) in wins]
            if cells and all(wins[c] for c in cells):
                key = (len(cells), -b0, -c0)
                if best is None or key > best[0]:
                    best = (key, b0, c0)
    if best is None:
        return {"fused_wins": False, "reason": "fused never beat gather on the measured grid"}
    _, b0, c0 = best
    return {"fused_wins": True, "min_batch": 1 if b0 == batches[0] else b0,
            "min_context": 0 if c0 == contexts[0] else c0,
            "cells_won": sum(wins.values()), "cells": len(wins)}


def print_table(rows: list[dict], out=sys.stdout) -> None:
    out.write(f"{'B':>3} {'ctx':>6} {'slabs':>5} {'gather_us':>10} {'fused_us':>9} {'sdpa_us':>8} "
              f"{'fused/gather':>12} {'fused/sdpa':>10} {'GB/s fused':>10} {'GB/s sdpa':>9}  route\n")
    for r in rows:
        out.write(f"{r['batch']:>3} {r['context']:>6} {r['slabs']:>5} {r['gather_us']:>10.1f} {r['fused_us']:>9.1f} "
                  f"{r['sdpa_us']:>8.1f} {r['gather_us'] / r['fused_us']:>11.2f}x {r['fused_us'] / r['sdpa_us']:>10.2f} "
                  f"{r['gbps_fused']:>10.0f} {r['gbps_sdpa']:>9.0f}  {r.get('route', '')}\n")


def main(args) -> int:
    import mlx.core as mx

    import pool.kernels as kernels
    from pool.fused_decision import detect_backend
    from pool.kernels.plan import KernelUnsupported

    tuning = kernel_tuning(args)  # bad flags are a usage error before anything is measured
    if args.out:  # an existing file is refused before minutes of measuring, not after
        check_target(args.out, args.force)
    backend = detect_backend()
    if backend not in ("cuda", "metal"):
        print(f"bench decode needs a GPU backend (CUDA or Metal); MLX's device here is {mx.default_device()} "
              f"({backend}): the fused kernel cannot run.", file=sys.stderr)
        return 2
    rows, refused = [], []
    for batch in args.batches:
        for context in args.contexts:
            try:
                rows.append(measure_cell(args, mx, backend, batch, context, tuning))
            except KernelUnsupported as exc:  # a cell the route cannot run (too many slab inputs): said, not a crash
                refused.append({"batch": batch, "context": context, "reason": str(exc)})
                print(f"B={batch} context={context}: the fused kernel cannot run this cell: {exc}", file=sys.stderr)
                continue
            if not args.json:
                print_table(rows[-1:], sys.stderr)
    if not rows:
        print("bench decode: no cell could run the fused kernel", file=sys.stderr)
        return 1
    thresholds = derive_thresholds(rows)
    result = {"device": mx.device_info(), "backend": backend, "mlx": mx.__version__, "kernel": tuning.as_dict(),
              "geometry": {"n_q_heads": args.n_q_heads, "n_kv_heads": args.n_kv_heads, "head_dim": args.head_dim,
                           "dtype": args.dtype, "block_size": args.block_size, "slab_blocks": args.slab_blocks,
                           "layout": args.layout},
              "command": " ".join(sys.argv),
              "rows": rows, "refused": refused, "thresholds": thresholds}
    if args.out:
        write_atomically(args.out, lambda temp: Path(temp).write_text(json.dumps(result, indent=1, default=str)),
                         force=args.force)
    if args.write_thresholds is not None:
        path = args.write_thresholds or kernels.THRESHOLDS_PATH
        stored = kernels.load_thresholds(path) if path == kernels.THRESHOLDS_PATH else {}
        stored[backend] = {**thresholds, "device": str(mx.device_info().get("device_name", "")),
                           "geometry": result["geometry"], "kernel": result["kernel"],
                           "command": result["command"], "measured": time.strftime("%Y-%m-%d")}
        with open(path, "w") as f:
            json.dump(stored, f, indent=1)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print_table(rows)
        print(f"thresholds: {json.dumps(thresholds)}")
    return 0


if __name__ == "__main__":  # python -m app.commands.bench_decode (machines without the TUI's dependencies)
    _parser = argparse.ArgumentParser(prog="slabscope bench decode", description=__doc__.splitlines()[0])
    add_arguments(_parser)
    from app.commands.errors import UsageError

    try:
        raise SystemExit(main(_parser.parse_args()))
    except UsageError as _exc:
        _parser.exit(2, f"slabscope bench {_exc}\n")
