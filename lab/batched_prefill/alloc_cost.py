"""What a pool's reservation costs on the device: ``count`` zero-filled slabs of ``shape`` made the storage's way
(one ``mx.full`` each from a cached zero scalar, one evaluation for all), timed after ``mx.clear_cache()`` (the
memory goes back to the device first, as after an engine's trim) and with the cache holding buffers of that size;
beside them the same bytes as one tensor per layer and K/V, and (on CUDA) the slabs born ``--group`` at a time by one
custom kernel whose outputs they are and which writes their zeros itself (one launch per group instead of one fill
per slab: the lever for the first chunk's reservation, docs/prefill.md). Prints ms per variant, median [range] over
rounds.

    PYTHONPATH=. python3 -m lab.batched_prefill.alloc_cost --count 1848 --rounds 5 --group 64
"""

from __future__ import annotations

import argparse
import statistics
import time


def timed(make, mx) -> float:
    t0 = time.perf_counter()
    arrays = make()
    mx.eval(arrays)
    mx.synchronize()
    return (time.perf_counter() - t0) * 1e3


ZERO_SOURCE = r"""
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)GROUP * UNITS) {
    return;
  }
  const int o = (int)(i / UNITS);
  const long long at = i % UNITS;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
{stores}
"""


def grouped_birth(shape: tuple, count: int, group: int, mx):
    """A maker of ``count`` zero-filled bf16 slabs of ``shape``, ``group`` outputs per kernel launch (the last launch
    takes the remainder), or None where MLX has no CUDA kernels (a CPU)."""
    if not (mx.default_device().type == mx.DeviceType.gpu and hasattr(mx.fast, "cuda_kernel")):
        return None
    elements = 1
    for extent in shape:
        elements *= extent
    units = elements * 2 // 16  # 16-byte stores; a slab's bytes are a multiple of 16
    kernels = {}

    def kernel(width: int):
        if width not in kernels:
            stores = "\n".join(f"  if (o == {g}) {{ reinterpret_cast<uint4*>(out{g})[at] = zero; }}"
                                for g in range(width))
            kernels[width] = mx.fast.cuda_kernel(
                name=f"ssp_lab_slab_birth_{width}", input_names=["unused"],
                output_names=[f"out{g}" for g in range(width)], source=ZERO_SOURCE.replace("{stores}", stores))
        return kernels[width]

    unused = mx.array([0], dtype=mx.int32)

    def make():
        arrays = []
        for start in range(0, count, group):
            width = min(group, count - start)
            threads = 256
            total = width * units
            arrays += kernel(width)(inputs=[unused], template=[("GROUP", width), ("UNITS", units)],
                                    grid=(-(-total // threads) * threads, 1, 1), threadgroup=(threads, 1, 1),
                                    output_shapes=[shape] * width, output_dtypes=[mx.bfloat16] * width)
        return arrays

    return make


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1848, help="slabs (K and V of every layer together)")
    parser.add_argument("--shape", default="32,8,32,128", help="one slab: rows, heads, block, head_dim")
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--group", type=int, default=64, help="slabs one birth kernel makes (CUDA only)")
    args = parser.parse_args()
    import mlx.core as mx

    shape = tuple(int(x) for x in args.shape.split(","))
    zero = mx.array(0, dtype=mx.bfloat16)
    per_tensor = args.count // (2 * args.layers)
    slabs = lambda: [mx.full(shape, zero) for _ in range(args.count)]  # noqa: E731
    whole = lambda: [mx.full((per_tensor * shape[0], *shape[1:]), zero)  # noqa: E731
                     for _ in range(2 * args.layers)]
    variants = [("slabs after clear_cache", slabs, True), ("slabs from the cache", slabs, False),
                ("one tensor a layer after clear_cache", whole, True)]
    born = grouped_birth(shape, args.count, args.group, mx)
    if born is None:
        print(f"(slabs born {args.group} a launch: CUDA only, skipped here)")
    else:
        check = born()  # the kernel's zeros are zeros (and its first compile happens outside the timing)
        mx.eval(check)
        if not all(mx.array_equal(a, mx.zeros_like(a)).item() for a in check[:4] + check[-4:]):
            raise SystemExit("the birth kernel left a slab non-zero")
        del check
        variants += [(f"slabs born {args.group} a launch after clear_cache", born, True),
                     (f"slabs born {args.group} a launch from the cache", born, False)]
    rows = {label: [] for label, _, _ in variants}
    for round_index in range(args.rounds + 1):
        for label, make, clear in variants:
            if clear:
                mx.clear_cache()
            ms = timed(make, mx)
            if round_index:
                rows[label].append(ms)
    for label, values in rows.items():
        print(f"{label:>40}: {statistics.median(values):.1f} ms [{min(values):.1f}-{max(values):.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
