"""The figures of a directory of recordings (``slabscope record`` output), one line per backend, plus JSON; the
tables of ``gpu_run/report.py`` and ``open_blocks/report.py`` are built from ``figures``:

* throughput: the run's tok/s (summary) and its ratio to dense;
* decode steps: first decode step, first *fused* decode step (and its index), median decode step, first fused /
  median; the decline reasons counted (e.g. "kernel for 33 slabs compiling");
* footprint: max(active + cache) over the samples vs the ideal (weight bytes + the K/V bytes of every cached token
  at the end of the burst: n x (prompt + gen - 1) tokens x 2 x layers x kv_heads x head_dim x dtype size);
* probe cost (the probes' own measure), cache trims, kernel-build figures (compiled / from disk, NVRTC seconds);
* pool growths: the op log's slab_append / grow ops (capacity raised; every one after the layers' first writes is
  measured from the allocator, two device syncs each: pool/copy_meter.py).

    python3 -m lab.record_figures DIR [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

MIB = 2**20
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}


def ideal_bytes(meta: dict) -> int | None:
    """Weights + K/V of every token cached at the end of a one-phase burst (None for other scenarios)."""
    model, params = meta.get("model", {}), meta.get("scenario", {}).get("params", {})
    if not {"n", "prompt_tokens", "gen_tokens"} <= set(params):
        return None
    per_token = 2 * model["num_layers"] * model["n_kv_heads"] * model["head_dim"] * ITEMSIZE[model["dtype"]]
    tokens = int(params["n"]) * (int(params["prompt_tokens"]) + int(params["gen_tokens"]) - 1)
    return int(model["weight_bytes"]) + tokens * per_token


def figures(path: str) -> dict:
    from probes.events import GatherRuns, Step
    from probes.replay import Session

    session = Session.open(path)
    meta = session.meta
    decode = [e for e in session.events_of(Step) if e.type == "decode"]
    fused_steps = {e.step for e in session.events_of(GatherRuns) if e.fused_layers}
    steps_ms = [e.wall_s * 1e3 for e in decode]
    prefill_ms = sum(e.wall_s for e in session.events_of(Step) if e.type == "prefill") * 1e3
    first_fused = next(((i, e.wall_s * 1e3) for i, e in enumerate(decode) if e.step in fused_steps), None)
    footprint = session.peak("footprint").value
    growths = _growth_ops(session)
    parts = _footprint_parts(session)
    ideal = ideal_bytes(meta)
    run = session.summary.summary if session.summary is not None else {}
    fused = run.get("fused_decode") or {}
    median = statistics.median(steps_ms) if steps_ms else None
    return {
        "backend": meta.get("backend"), "path": path, "tok_s": run.get("tok_s"),
        "decode_steps": len(steps_ms), "first_decode_step_ms": steps_ms[0] if steps_ms else None,
        "prefill_ms": prefill_ms, "decode_ms": sum(steps_ms),
        "median_decode_step_ms": median,
        "first_fused_step_index": first_fused[0] if first_fused else None,
        "first_fused_step_ms": first_fused[1] if first_fused else None,
        "first_fused_over_median": first_fused[1] / median if first_fused and median else None,
        "declines": {r: n for r, n in (fused.get("reasons") or {}).items() if not r.startswith("fused")},
        "kernel_build": fused.get("build"),
        "footprint_bytes": footprint, "ideal_bytes": ideal,
        "footprint_over_ideal": footprint / ideal if ideal else None,
        "probe_cost_fraction": (run.get("probe_overhead") or {}).get("cost_fraction"),
        "cache_trim": run.get("cache_trim"),
        "pool_growths": growths,
        "footprint_parts": parts,
        "rehearsal_s": (meta.get("rehearsal") or {}).get("seconds"),
    }


PARTS = ("weights", "pool_live", "pool_free", "other_active", "cache")


def _footprint_parts(session) -> dict | None:
    """What the sample at the footprint peak held (bytes): weights, live K/V, reserved-but-free pool rows, other
    active arrays (activations, transients, the dense caches), MLX's buffer cache: they sum to the footprint."""
    window = session.samples.window()
    best = session.samples.argmax("footprint", 0, len(window))
    if best is None:
        return None
    return {name: int(getattr(window, name)[best]) for name in PARTS}


def _growth_ops(session) -> int | None:
    """Capacity growths: the op log's slab_append (slab) and grow (monolithic) ops; None for a dense run."""
    from pool.ops import Grow, SlabAppend

    if session.meta.get("backend") == "dense":
        return None
    return sum(1 for entry in session.all_ops() if isinstance(entry.op, (SlabAppend, Grow)))


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    paths = sorted(os.path.join(args.directory, n) for n in os.listdir(args.directory) if n.endswith(".slabrec"))
    rows = [figures(p) for p in paths]
    dense = next((r for r in rows if r["backend"] == "dense"), None)
    for r in rows:
        ratio = r["tok_s"] / dense["tok_s"] if dense and r["tok_s"] and dense["tok_s"] else None
        r["tok_s_over_dense"] = ratio
        print(f"{r['backend']:<10} tok/s {_f(r['tok_s'], ',.0f')} ({_f(ratio, '.2f')}x dense) | decode steps "
              f"{r['decode_steps']}: first {_f(r['first_decode_step_ms'], '.1f')} ms, first fused "
              f"#{r['first_fused_step_index']} {_f(r['first_fused_step_ms'], '.1f')} ms, median "
              f"{_f(r['median_decode_step_ms'], '.1f')} ms (first fused / median "
              f"{_f(r['first_fused_over_median'], '.2f')}) | max(active+cache) {r['footprint_bytes'] / MIB:,.0f} MiB"
              f" = {_f(r['footprint_over_ideal'], '.3f')}x (weights + live KV "
              f"{_f(r['ideal_bytes'] and r['ideal_bytes'] / MIB, ',.0f')} MiB) | probes "
              f"{_f(r['probe_cost_fraction'] and 100 * r['probe_cost_fraction'], '.2f')}% | trims "
              f"{(r['cache_trim'] or {}).get('trims')} | growths {_f(r['pool_growths'], 'd')} | declines "
              f"{r['declines'] or '-'} | prefill {r['prefill_ms'] / 1e3:.2f} s, decode {r['decode_ms'] / 1e3:.2f} s,"
              f" rehearsal {_f(r['rehearsal_s'], '.2f')} s | build {r['kernel_build'] or '-'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
