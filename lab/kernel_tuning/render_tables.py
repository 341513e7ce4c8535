"""Render the GPU sessions' result files as the markdown tables of docs/gpu.md.

    python app/bench/device/render_tables.py DIR [--update docs/gpu.md]

DIR holds any of: correctness.jsonl, bench_decode.json, bench_decode_fragmented.json, tune.json, session_b.json.
With ``--update`` every ``<!-- BEGIN:name -->`` ... ``<!-- END:name -->`` section of the file whose table could
be rendered is replaced; without it the tables are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from summarize_errors import summarize  # noqa: E402

MIB = 2**20


def _load(directory: str, name: str):
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return [json.loads(x) for x in f if x.strip()] if name.endswith(".jsonl") else json.load(f)


def decode_table(run: dict) -> str:
    knobs = run.get("kernel", {})
    lines = [f"Device: {run['device'].get('device_name')}, MLX {run['mlx']}; geometry {run['geometry']}; kernel "
             f"knobs {knobs}. Times are medians in microseconds per decode step of one layer.", "",
             "| B | context | slabs | splits | gather us | fused us | SDPA us | fused vs gather | fused / SDPA "
             "| fused GB/s |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in run["rows"]:
        lines.append(f"| {r['batch']} | {r['context']} | {r['slabs']} | {r['splits']} | {r['gather_us']:.1f} | "
                     f"{r['fused_us']:.1f} | {r['sdpa_us']:.1f} | {r['gather_us'] / r['fused_us']:.2f}x | "
                     f"{r['fused_us'] / r['sdpa_us']:.2f} | {r['gbps_fused']:.0f} |")
    lines += ["", f"Thresholds derived: `{json.dumps(run['thresholds'])}`"]
    return "\n".join(lines)


def correctness_table(records: list[dict]) -> str:
    rows = summarize([json.dumps(r) for r in records])
    header = rows[0].split()
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r.split()) + " |" for r in rows[1:]]
    return "\n".join(out)


def tune_table(tune: dict) -> str:
    lines = ["| variant | geometric mean fused us (B >= 4 cells) |", "|---|---:|"]
    for name, score in sorted(tune["scores_us"].items(), key=lambda kv: kv[1]):
        lines.append(f"| {name}{' (chosen)' if name == tune['winner_name'] else ''} | {score:.1f} |")
    return "\n".join(lines)


def growth_table(growth: dict) -> str:
    keys = ["growth_events", "bytes_copied", "bytes_copied_model", "live_bytes", "max_active_plus_cache_bytes",
            "mx_peak_bytes", "wall_s", "gather_bytes_copied", "gather_bytes_copied_model"]
    lines = ["| design | " + " | ".join(keys) + " | footprint / live |", "|---|" + "---:|" * (len(keys) + 1)]
    for design, r in growth.items():
        ratio = r["max_active_plus_cache_bytes"] / r["live_bytes"] if r.get("live_bytes") else float("nan")
        lines.append(f"| {design} | " + " | ".join(str(r.get(k)) for k in keys) + f" | {ratio:.2f} |")
    return "\n".join(lines)


def footprint_table(compare: dict) -> str:
    lines = ["| backend | phase | max(active+cache) MiB | RSS MiB | ratio vs dense | tok/s | tok/s vs dense |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in compare["rows"]:
        lines.append(f"| {r['backend']} | {r['phase']} | {r['footprint_max'] / MIB:.1f} | {r['rss_max'] / MIB:.1f} | "
                     f"{r['footprint_ratio']:.3f} | {r['tokens_per_s']:.1f} | {r['throughput_ratio']:.2f} |")
    return "\n".join(lines)


def throughput_table(b: dict) -> str:
    lines = ["| engine | wall s | prefill tok/s | decode tok/s | total tok/s | max(active+cache) MiB | footprint "
             "sampling |", "|---|---:|---:|---:|---:|---:|---|"]
    labels = {"run_dense": "slabscope dense", "run_slab": "slabscope slab (fused decode per decision rule)",
              "run_slab_gather": "slabscope slab, SLABSCOPE_PAGED_ATTENTION_NATIVE=0 (gather)"}
    for name, label in labels.items():
        r = (b.get(name) or {}).get("json")
        if r:
            p = next(iter(r["phases"].values()))
            counters = (r.get("pool") or {}).get("counters", {})
            fused = f", {counters.get('fused_decisions', 0)} fused / {counters.get('gather_decisions', 0)} gather " \
                    "layer decisions" if counters else ""
            lines.append(f"| {label}{fused} | {r['wall_s']:.2f} | {p['prefill_tok_s']:.0f} | "
                         f"{p['decode_tok_s']:.1f} | {r['tok_s']:.0f} | "
                         f"{r['footprint']['max_footprint_bytes'] / MIB:.1f} | step boundaries |")
    m = (b.get("mlxlm_batchgenerator") or {}).get("json")
    if m:
        lines.append(f"| mlx-lm BatchGenerator | {m['wall_s']:.2f} | {m['prompt_tps'] or 0:.0f} | "
                     f"{m['generation_tps']:.1f} | {m['tok_s']:.0f} | {m['max_active_plus_cache_bytes'] / MIB:.1f} | "
                     f"thread {m['samples']} samples + steps |")
    return "\n".join(lines)


def steady_table(steady: dict) -> str:
    """Per engine, run 1 (pays JIT) and run 2 (steady state) of the former steady-throughput script (now slabscope bench throughput), one process."""
    lines = ["| engine | run | wall s | prefill tok/s | decode tok/s | total tok/s | decode step median ms | "
             "first decode step ms |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for engine, runs in steady.items():
        for i, r in enumerate(runs, 1):
            prefill = r.get("prefill_tok_s", r.get("prompt_tps")) or 0
            decode = r.get("decode_tok_s", r.get("generation_tps")) or 0
            first = r.get("decode_step_first_ms")
            lines.append(f"| {engine} | {i} | {r['wall_s']:.2f} | {prefill:.0f} | {decode:.1f} | {r['tok_s']:.0f} | "
                         f"{r['decode_step_median_ms']:.1f} | {'-' if first is None else f'{first:.0f}'} |")
    return "\n".join(lines)


def render(directory: str) -> dict[str, str]:
    tables = {}
    if (records := _load(directory, "correctness.jsonl")) is not None:
        tables["correctness"] = correctness_table(records)
    if (run := _load(directory, "bench_decode.json")) is not None:
        tables["microbench"] = decode_table(run)
    if (run := _load(directory, "bench_decode_fragmented.json")) is not None:
        tables["microbench-fragmented"] = decode_table(run)
    if (tune := _load(directory, "tune.json")) is not None:
        tables["tuning"] = tune_table(tune)
    if (steady := _load(directory, "steady.json")) is not None:
        tables["steady"] = steady_table(steady)
    if (b := _load(directory, "session_b.json")) is not None:
        if (g := (b.get("bench_growth") or {}).get("json")):
            tables["growth"] = growth_table(g)
        if (c := (b.get("compare") or {}).get("json")):
            tables["footprint"] = footprint_table(c)
        tables["throughput"] = throughput_table(b)
    return tables


def update(path: str, tables: dict[str, str]) -> list[str]:
    with open(path) as f:
        text = f.read()
    done = []
    for name, table in tables.items():
        pattern = re.compile(rf"(<!-- BEGIN:{re.escape(name)} -->\n).*?(<!-- END:{re.escape(name)} -->)", re.S)
        if pattern.search(text):
            text = pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text)
            done.append(name)
    with open(path, "w") as f:
        f.write(text)
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--update", default=None)
    args = parser.parse_args()
    tables = render(args.directory)
    if args.update:
        print("updated:", ", ".join(update(args.update, tables)))
    else:
        for name, table in tables.items():
            print(f"## {name}\n{table}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
