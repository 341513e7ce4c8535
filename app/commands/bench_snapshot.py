"""``slabscope bench snapshot``: the cost of ``PagedKVPool.snapshot()`` on a large, fragmented pool.

Builds a pool with ``--layers`` layers of ``--slabs`` slabs each (default 28 x 64 slabs of 32
blocks = 2048 rows per layer), fills it with sequences, releases every third one, refills the holes with shorter
sequences (so tables interleave), releases every fourth survivor (so free rows are fragmented), shares a prefix by
clone and parks one sequence in a handle. K/V are tiny (1 head x 8, float16): snapshot cost depends on rows and
tables, not on head geometry. Then it times three cases:

* cold: the per-layer cache cleared before each snapshot (everything rebuilt);
* after decode: every sequence appends one token first (some cross a block boundary, so every layer's rows change);
* unchanged: nothing happened since the previous snapshot (per-layer caches hit).

mlx is imported only inside :func:`main`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import msgspec

from app.commands.arg_types import positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=positive_int, default=28, help="layers (default 28)")
    parser.add_argument("--slabs", type=positive_int, default=64, help="slabs per layer to fill (default 64)")
    parser.add_argument("--slab-blocks", type=positive_int, default=32, help="blocks per slab (default 32)")
    parser.add_argument("--block-size", type=positive_int, default=32, help="tokens per block (default 32)")
    parser.add_argument("--sequences", type=positive_int, default=24, help="sequences filling the pool (default 24)")
    parser.add_argument("--repeat", type=positive_int, default=30, help="snapshots timed per case (default 30)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")


def main(args: argparse.Namespace) -> int:
    import mlx.core as mx

    from pool import PagedKVPool, PoolConfig

    pool = PagedKVPool(PoolConfig(num_layers=args.layers, block_size=args.block_size, slab_blocks=args.slab_blocks))
    state = _fill(mx, pool, args)
    cases = {
        "cold": _time(pool, args.repeat, before=pool.snapshot_cache.clear),
        "after_decode": _time(pool, args.repeat, before=lambda: _decode_step(mx, pool, state)),
        "unchanged": _time(pool, args.repeat, before=None),
    }
    snap = pool.snapshot()
    layer0 = snap.layers[0]
    figures = {
        "layers": args.layers, "slabs_per_layer": layer0.num_chunks, "rows_per_layer": layer0.capacity_rows,
        "sequences": len(snap.seq_rows), "live_blocks": snap.stats.live_blocks,
        "free_rows_layer0": layer0.free_rows, "holes_layer0": layer0.holes,
        "fragmentation_layer0": round(layer0.fragmentation, 3),
        "snapshot_json_bytes": len(msgspec.json.encode(snap)),
        "ms_per_snapshot": {name: {"median": round(statistics.median(t), 3), "max": round(max(t), 3)}
                            for name, t in cases.items()},
    }
    print(json.dumps(figures, indent=2) if args.json else _format(figures))
    return 0


def _fill(mx, pool, args) -> dict:
    """Fill ~all slabs with sequences, punch holes, refill them, punch more holes, clone and park prefixes."""
    rows_target = args.slabs * args.slab_blocks
    per_seq_blocks = max(1, rows_target // args.sequences)
    state = {"next": 0, "kv": {}}
    for _ in range(args.sequences):
        _new_sequence(mx, pool, state, per_seq_blocks * args.block_size - 3)
    for seq in list(pool.sequence_ids())[::3]:
        pool.release(seq)
    while pool.stats().free_blocks and len(pool.sequence_ids()) < 2 * args.sequences:
        _new_sequence(mx, pool, state, (per_seq_blocks // 2) * args.block_size + 5)
    for seq in list(pool.sequence_ids())[1::4]:
        pool.release(seq)  # leave holes between the survivors: fragmented free rows
    donor = pool.sequence_ids()[0]
    pool.clone(donor, state["next"], pool.step_view([donor]).lengths[0] // 2)
    state["next"] += 1
    parked = pool.sequence_ids()[1]
    pool.detach(parked)
    return state


def _new_sequence(mx, pool, state, tokens: int) -> None:
    seq = state["next"]
    state["next"] += 1
    pool.add_sequence(seq)
    _write(mx, pool, seq, 0, max(1, tokens))


def _write(mx, pool, seq: int, start: int, tokens: int) -> None:
    pool.prepare_write(seq, start, tokens)
    slots = pool.write_slots([seq], [start], tokens)
    keys = mx.ones((1, tokens, 1, 8), dtype=mx.float16)
    for layer in range(pool.config.num_layers):
        pool.write(layer, slots, keys, keys)


def _decode_step(mx, pool, state) -> None:
    seqs = pool.sequence_ids()
    for seq, length in zip(seqs, pool.step_view(seqs).lengths):
        _write(mx, pool, seq, length, 1)
    mx.eval(*[slab for layer in range(pool.config.num_layers) for slab in pool.slabs(layer)[0]])


def _time(pool, repeat: int, before) -> list[float]:
    pool.snapshot()  # warm-up (and fills the cache for "unchanged")
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        pool.snapshot()
        times.append((time.perf_counter() - start) * 1000)
    return times


def _format(f: dict) -> str:
    lines = [f"bench snapshot: {f['layers']} layers x {f['slabs_per_layer']} slabs ({f['rows_per_layer']} rows/layer), "
             f"{f['sequences']} sequences, {f['live_blocks']} live blocks; layer 0: {f['free_rows_layer0']} free "
             f"rows in {f['holes_layer0']} holes, fragmentation {f['fragmentation_layer0']}; "
             f"snapshot JSON {f['snapshot_json_bytes'] / 1024:.0f} KiB",
             f"{'case':<14}{'median ms':>11}{'max ms':>9}"]
    for name, t in f["ms_per_snapshot"].items():
        lines.append(f"{name:<14}{t['median']:>11.2f}{t['max']:>9.2f}")
    return "\n".join(lines)
