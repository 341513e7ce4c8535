"""Which part of a fused-kernel call costs host time at encode (diagnostic; figures in docs/measurements-log.md,
session E): the real paged decode kernel vs a trivial kernel, 28 chained calls whose slab inputs are shared by all
calls or distinct per call (as the layers of a decode step are), slabs fresh (mx.zeros) or written by a scatter
first.

    python3 -m lab.decode_step.encode_probe
"""

from __future__ import annotations

import functools
import json
import statistics
import time

import mlx.core as mx

from pool.kernels.paged_decode_cuda import paged_decode_cuda
from pool.kernels.plan import plan_decode

LAYERS, SLABS, BATCH, HEADS, DIM = 28, 33, 8, 8, 128


@functools.cache
def trivial_kernel():
    """A kernel that copies q and takes 2 x 64 slab inputs it never reads: the launch cost of the inputs alone."""
    return mx.fast.cuda_kernel(name="probe_trivial", input_names=["q"] + [f"x{i}" for i in range(2 * 64)],
                               output_names=["out"],
                               source="const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                      "  if (i < 8 * 16 * 128) { out[i] = q[i]; }")


def slab_sets(distinct: bool, written: bool):
    shape = (32, 32, HEADS, DIM)
    count = LAYERS if distinct else 1
    sets = []
    for _ in range(count):
        k = [mx.zeros(shape, dtype=mx.bfloat16) for _ in range(SLABS)]
        v = [mx.zeros(shape, dtype=mx.bfloat16) for _ in range(SLABS)]
        mx.eval(k, v)
        if written:
            rows, offs = mx.array([1, 2], dtype=mx.int32), mx.array([0, 0], dtype=mx.int32)
            upd = mx.ones((2, HEADS, DIM), dtype=mx.bfloat16)
            for s in k + v:
                s[rows, offs] = upd
            mx.eval(k, v)
        sets.append((k, v))
    return [sets[i % count] for i in range(LAYERS)]


def run(kind: str, distinct: bool, written: bool, repeats: int = 20) -> dict:
    sets = slab_sets(distinct, written)
    rows = [list(range(i * 130, i * 130 + 130)) for i in range(BATCH)]
    plan = plan_decode(rows, [4128] * BATCH, [0] * BATCH, block_size=32, slab_blocks=32, num_slabs=SLABS,
                       n_kv_heads=HEADS, scale=0.088)
    meta = mx.array(plan.meta)
    q = mx.zeros((BATCH, 16, 1, DIM), dtype=mx.bfloat16)
    mx.eval(q, meta)
    build, encode = [], []
    for i in range(repeats + 3):
        t0 = time.perf_counter()
        x = q
        for k, v in sets:
            if kind == "real":
                x = paged_decode_cuda(x, k, v, plan, meta=meta)
            else:
                pad = [k[0]] * (64 - SLABS)
                (x,) = trivial_kernel()(inputs=[x, *k, *pad, *v, *pad], template=[], grid=(8 * 16 * 128, 1, 1),
                               threadgroup=(256, 1, 1), output_shapes=[q.shape], output_dtypes=[q.dtype])
        t1 = time.perf_counter()
        mx.async_eval(x)
        t2 = time.perf_counter()
        mx.eval(x)
        if i >= 3:
            build.append(t1 - t0)
            encode.append(t2 - t1)
    return {"kernel": kind, "distinct_slabs_per_call": distinct, "written": written,
            "build_ms": round(statistics.median(build) * 1e3, 3), "encode_ms": round(statistics.median(encode) * 1e3, 3),
            "splits": plan.num_splits}


if __name__ == "__main__":
    for kind in ("trivial", "real"):
        for distinct in (False, True):
            for written in (False, True):
                print(json.dumps(run(kind, distinct, written)), flush=True)
