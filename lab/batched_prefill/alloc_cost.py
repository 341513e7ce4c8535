"""What a pool's reservation costs on the device: ``count`` zero-filled slabs of ``shape`` made the storage's way
(one ``mx.full`` each from a cached zero scalar, one evaluation for all), timed after ``mx.clear_cache()`` (the
memory goes back to the device first, as after an engine's trim) and with the cache holding buffers of that size;
beside them the same bytes as one tensor per layer and K/V. Prints ms per variant, median [range] over rounds.

    PYTHONPATH=. python3 -m lab.batched_prefill.alloc_cost --count 1848 --rounds 5
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1848, help="slabs (K and V of every layer together)")
    parser.add_argument("--shape", default="32,8,32,128", help="one slab: rows, heads, block, head_dim")
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import mlx.core as mx

    shape = tuple(int(x) for x in args.shape.split(","))
    zero = mx.array(0, dtype=mx.bfloat16)
    per_tensor = args.count // (2 * args.layers)
    slabs = lambda: [mx.full(shape, zero) for _ in range(args.count)]  # noqa: E731
    whole = lambda: [mx.full((per_tensor * shape[0], *shape[1:]), zero)  # noqa: E731
                     for _ in range(2 * args.layers)]
    rows = {"slabs after clear_cache": [], "slabs from the cache": [], "one tensor a layer after clear_cache": []}
    for round_index in range(args.rounds + 1):
        for label, make, clear in (("slabs after clear_cache", slabs, True), ("slabs from the cache", slabs, False),
                                   ("one tensor a layer after clear_cache", whole, True)):
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
