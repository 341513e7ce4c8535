"""Summarise the correctness report (JSON lines from SLABSCOPE_GPU_REPORT) as max errors per group.

    python3 -m lab.kernel_tuning.summarize_errors correctness.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def summarize(lines: list[str]) -> list[str]:
    groups: dict[tuple, dict] = defaultdict(lambda: {"n": 0, "vs_gather": 0.0, "vs_fp32": 0.0, "gather_vs_fp32": 0.0})
    for line in lines:
        rec = json.loads(line)
        if "skipped" in rec:
            continue
        key = (rec.get("case"), rec.get("dtype", "bfloat16"), rec.get("layout", "-"), str(rec.get("unroll", "-")))
        g = groups[key]
        g["n"] += 1
        g["vs_gather"] = max(g["vs_gather"], rec.get("rel_err_vs_gather", 0.0))
        g["vs_fp32"] = max(g["vs_fp32"], rec.get("rel_err_vs_fp32", 0.0))
        g["gather_vs_fp32"] = max(g["gather_vs_fp32"], rec.get("gather_rel_err_vs_fp32", 0.0))
    out = [f"{'case':<14} {'dtype':<9} {'layout':<11} {'unroll':>7} {'n':>3} {'fused~gather':>12} {'fused~fp32':>10} "
           f"{'gather~fp32':>11}"]
    for (case, dtype, layout, unroll), g in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        out.append(f"{case:<14} {dtype:<9} {layout:<11} {unroll:>7} {g['n']:>3} {g['vs_gather']:>12.2e} {g['vs_fp32']:>10.2e} "
                   f"{g['gather_vs_fp32']:>11.2e}")
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print("\n".join(summarize([ln for ln in f if ln.strip()])))
