"""Render ``tune.sh``'s result files as the kernel tables of docs/gpu.md (correctness, microbench, tuning).

    python3 -m lab.kernel_tuning.render_tables DIR [--update docs/gpu.md]

DIR holds any of: correctness.jsonl, bench_decode.json, bench_decode_fragmented.json, tune.json. With ``--update``
every ``<!-- BEGIN:name -->`` ... ``<!-- END:name -->`` section of the file whose table could be rendered is
replaced; without it the tables are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re

from lab.kernel_tuning.summarize_errors import summarize


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
