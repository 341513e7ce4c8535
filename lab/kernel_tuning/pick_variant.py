"""Pick the fastest kernel variant from `slabscope bench decode` runs (one JSON per variant, see tune.sh).

Score: geometric mean of the fused time over the cells with batch >= 4 (where the decision rule uses the kernel
most); lower wins. Prints one JSON object: every variant's knobs, score and rows, and the winner's knobs.

    python3 -m lab.kernel_tuning.pick_variant run1.json run2.json ...
"""

from __future__ import annotations

import argparse
import json
import math


def score(rows: list[dict]) -> float:
    times = [r["fused_us"] for r in rows if r["batch"] >= 4] or [r["fused_us"] for r in rows]
    return math.exp(sum(math.log(t) for t in times) / len(times))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="bench decode --out JSON files, one per variant")
    variants = {}
    for path in parser.parse_args().runs:
        with open(path) as f:
            run = json.load(f)
        knobs = run["kernel"]
        name = f"unroll{knobs['unroll']}_target{knobs['target_blocks']}"
        variants[name] = {"kernel": knobs, "score_us": score(run["rows"]), "rows": run["rows"]}
    winner = min(variants, key=lambda n: variants[n]["score_us"])
    print(json.dumps({"winner": variants[winner]["kernel"], "winner_name": winner,
                      "scores_us": {n: round(v["score_us"], 1) for n, v in variants.items()},
                      "variants": variants}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
