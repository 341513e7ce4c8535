"""``slabscope warmup``: compile the fused CUDA decode kernels a run will use into the persistent kernel cache, so
no process (not even the first) builds them while it runs.

The geometry comes from a model (``--model``, loaded once to read its attention shape) or from explicit flags
(``--head-dim --q-heads --kv-heads --dtype``: no model load, no GPU needed with ``--sm``). The slab counts come
from ``--max-slabs`` or from a scenario: the K/V of every request it submits, in slabs of the pool geometry (an
upper bound: nothing is shared). On the slab-table route (the default) one set serves every slab count (both
first passes, the merge, the table updates); with SLABSCOPE_SLAB_TABLE=0 every slab-count bucket up to that is built
(both first passes and the merge).
Runs use the same cache (``$SLABSCOPE_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/slabscope/cuda-kernels``). mlx is
imported only to read the model or the device.
"""

from __future__ import annotations

import json
import sys
import time

from app.commands.arg_types import positive_int


def add_parser(sub) -> None:
    p = sub.add_parser("warmup", help="compile the fused CUDA kernels a run will use into the persistent cache",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="read the attention geometry from this model")
    p.add_argument("--dtype", default=None, help="bfloat16 (default with --model on a GPU) or float16")
    p.add_argument("--head-dim", type=positive_int, default=None)
    p.add_argument("--q-heads", type=positive_int, default=None)
    p.add_argument("--kv-heads", type=positive_int, default=None)
    p.add_argument("--block-size", type=positive_int, default=None, help="tokens per block (default: scenario's, else 32)")
    p.add_argument("--slab-blocks", type=positive_int, default=None, help="blocks per slab (default: scenario's, else 32)")
    p.add_argument("--scenario", default="distinct_burst", help="size the slab counts from this scenario")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="scenario overrides")
    p.add_argument("--max-slabs", type=positive_int, default=None, help="build every bucket up to this many slabs")
    p.add_argument("--sm", type=positive_int, default=None,
                   help="target compute capability, e.g. 90 (default: MLX's CUDA device; needed without a GPU)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=main)


def _geometry(args) -> tuple[str, int, int, int]:
    """(dtype, head_dim, q_heads, kv_heads) from flags, else from the model."""
    explicit = (args.head_dim, args.q_heads, args.kv_heads)
    if all(v is not None for v in explicit):
        return args.dtype or "bfloat16", args.head_dim, args.q_heads, args.kv_heads
    if args.model is None:
        raise ValueError("give --model, or all of --head-dim --q-heads --kv-heads")
    from app.models import load_model

    loaded = load_model(args.model, dtype=args.dtype)
    heads = int(getattr(loaded.model.args, "num_attention_heads", loaded.n_kv_heads))
    return loaded.dtype, loaded.head_dim, heads, loaded.n_kv_heads


def _scenario_slabs(args, pool: dict) -> int:
    """Slabs the scenario's requests would fill if nothing were shared or freed (prompt + generated tokens, whole
    blocks each), in the pool's geometry: an upper bound for the slab counts a run reaches."""
    from app.workloads.scenarios import load_scenario

    scenario = load_scenario(args.scenario, _overrides(args))
    blocks = 0
    for phase in scenario.phases:
        if phase.kind == "idle":
            continue
        per_request = max(phase.prompt_tokens) + phase.shared_prefix + max(phase.gen_tokens)
        # a conversation's turn t holds the t turns before it: turns * (turns + 1) / 2 turn-lengths in all
        requests = phase.count if phase.kind == "requests" else phase.turns * (phase.turns + 1) // 2
        blocks += max(requests, 1) * -(-per_request // pool["block_size"])
    return -(-blocks // pool["slab_blocks"])


def _overrides(args) -> dict:
    from app.workloads.scenarios import parse_overrides

    return parse_overrides(args.set)


def _pool(args) -> dict:
    from app.workloads.scenarios import load_scenario
    from pool.config import DEFAULT_BLOCK_SIZE, DEFAULT_SLAB_BLOCKS

    suggested = load_scenario(args.scenario, _overrides(args)).pool
    return {"block_size": args.block_size or suggested.get("block_size", DEFAULT_BLOCK_SIZE),
            "slab_blocks": args.slab_blocks or suggested.get("slab_blocks", DEFAULT_SLAB_BLOCKS)}


def main(args) -> int:
    from pool.kernels.cuda_builds import KernelBuilds, device_sm
    from pool.kernels.paged_decode_cuda import MAX_SLABS
    from pool.kernels.plan import slab_bucket
    from pool.kernels.slab_table import table_route

    try:
        dtype, head_dim, q_heads, kv_heads = _geometry(args)
        pool = _pool(args)
        max_slabs = min(MAX_SLABS, args.max_slabs or _scenario_slabs(args, pool))
        geometry = KernelBuilds.geometry_for(dtype=dtype, head_dim=head_dim, n_q_heads=q_heads,
                                             n_kv_heads=kv_heads, block_size=pool["block_size"])
        if geometry is None:
            raise ValueError(f"the fused kernel cannot run {dtype}, head_dim {head_dim}, {q_heads}/{kv_heads} "
                             f"heads, block size {pool['block_size']}: nothing to build")
        builds = KernelBuilds(args.sm or device_sm())
    except Exception as exc:  # noqa: BLE001 - one line, exit 2 (no NVRTC, no GPU without --sm, bad geometry)
        print(f"slabscope warmup: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if table_route():  # one set of kernels at every slab count (pool/kernels/slab_table.py)
        buckets, variants = [], geometry.table_variants()
    else:
        buckets = sorted({slab_bucket(n) for n in range(1, max_slabs + 1)})
        variants = list(dict.fromkeys(v for b in buckets for v in geometry.variants(b)))
    start = time.perf_counter()
    states = builds.warm(variants)
    stats = builds.stats()
    report = {"geometry": geometry.__dict__, "max_slabs": max_slabs, "buckets": buckets, "variants": len(variants),
              "route": "slab table" if not buckets else "per-slab inputs",
              "compiled": stats["compiled"], "from_disk": stats["from_disk"], "failed": stats["failed"],
              "compile_s": stats["compile_s"], "wall_s": round(time.perf_counter() - start, 3),
              "cache_dir": stats["cache_dir"], "arch": stats["arch"], "nvrtc": stats["nvrtc"],
              "errors": sorted({s.error.splitlines()[0] for s in states if s.status == "failed"})}
    if args.json:
        print(json.dumps(report))
    else:
        slabs = "any slab count (slab table)" if not buckets else f"up to {max_slabs} slabs (buckets {buckets})"
        print(f"kernels for {dtype} head_dim {head_dim}, {q_heads}/{kv_heads} heads, block {pool['block_size']}, "
              f"{slabs}, {stats['arch']}, NVRTC {stats['nvrtc']}:")
        print(f"  {len(variants)} variants: {report['compiled']} compiled in {report['compile_s']} s, "
              f"{report['from_disk']} already in {report['cache_dir']}, {report['failed']} failed "
              f"({report['wall_s']} s wall)")
        for error in report["errors"]:
            print(f"  error: {error}")
    return 1 if report["failed"] else 0
