"""Prefill tok/s and bytes gathered: slab paged route vs slab gather route vs dense, one prompt per run, interleaved
rounds after a warm-up (median and range). Usage: PYTHONPATH=. python3 -m lab.paged_prefill.routes [--small]
[--model M] [--prompts 1024,2048,4096] [--rounds 5] [--chunk 256]. Prints one table; a second table (bytes,
metered from MLX's allocator) comes from one extra metered run per cell, so the timed rounds are not slowed."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

ROUTES = (("slab paged", "slab", "1"), ("slab gather", "slab", "0"), ("dense", "dense", "0"))


def _scenario(directory: str, prompt: int) -> str:
    path = os.path.join(directory, f"p{prompt}.toml")
    with open(path, "w") as f:
        f.write(f'description = "one prompt"\n[[phases]]\nname = "p"\nkind = "requests"\ncount = 1\n'
                f"concurrency = 1\nprompt_tokens = {prompt}\ngen_tokens = 1\n")
    return path


def _run(loaded, scenario: str, backend: str, route: str, chunk: int, measure: bool) -> dict:
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    os.environ["SLABSCOPE_PAGED_PREFILL"] = route
    spec = RunSpec(scenario=scenario, backend=backend, model=loaded.name, prefill_chunk=chunk,
                   measure_gathers=measure)
    summary = run_workload(spec, lambda event: None, loaded=loaded, check_integrity=False)
    phase = next(iter(summary["phases"].values()))
    counters = (summary.get("pool") or {}).get("counters", {})
    return {"tok_s": phase["prefill_tok_s"], "bytes": counters.get("prefill_bytes_gathered"),
            "model": counters.get("prefill_bytes_gathered_model")}


def _mib(value) -> str:
    return "no read" if value is None else f"{value / 2**20:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", default=os.environ.get("SMALL") == "1")
    parser.add_argument("--model", default=None)
    parser.add_argument("--prompts", default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--dtype", default=None)
    args = parser.parse_args()
    from app.models import load_model

    model = args.model or ("synthetic:tiny-llama" if args.small else "smollm2-135m")
    prompts = [int(p) for p in (args.prompts or ("128,256" if args.small else "1024,2048,4096")).split(",")]
    rounds = 2 if args.small else args.rounds
    loaded = load_model(model, dtype=args.dtype)
    with tempfile.TemporaryDirectory() as directory:
        scenarios = {p: _scenario(directory, p) for p in prompts}
        times: dict = {}
        for p in prompts:  # warm-up: every cell once
            for label, backend, route in ROUTES:
                _run(loaded, scenarios[p], backend, route, args.chunk, False)
        for r in range(rounds):
            order = ROUTES[r % len(ROUTES):] + ROUTES[:r % len(ROUTES)]  # rotate: nobody always first
            for p in prompts:
                for label, backend, route in order:
                    times.setdefault((p, label), []).append(_run(loaded, scenarios[p], backend, route, args.chunk,
                                                                 False)["tok_s"])
            print(f"round {r + 1}/{rounds}: " + ", ".join(f"{p} {label} {v[-1]:.0f}" for (p, label), v in
                                                        times.items()), file=sys.stderr, flush=True)
        metered = {(p, label): _run(loaded, scenarios[p], backend, route, args.chunk, True)
                   for p in prompts for label, backend, route in ROUTES if backend != "dense"}
    print(f"prefill tok/s, {model} ({loaded.dtype}), chunk {args.chunk}, median [min-max] over {rounds} interleaved "
          f"rounds after a warm-up")
    print(f"{'prompt':>7} " + " ".join(f"{label:>26}" for label, _, _ in ROUTES))
    for p in prompts:
        cells = []
        for label, _, _ in ROUTES:
            v = times[(p, label)]
            cells.append(f"{statistics.median(v):>9.0f} [{min(v):.0f}-{max(v):.0f}]".rjust(26))
        print(f"{p:>7} " + " ".join(cells))
    print("\nprefill bytes gathered (MiB, measured from MLX's allocator; model = shape-derived)")
    for p in prompts:
        line = "  ".join(f"{label}: {_mib(metered[(p, label)]['bytes'])} measured / "
                         f"{metered[(p, label)]['model'] / 2**20:.2f} model" for label, b, _ in ROUTES if b != "dense")
        print(f"{p:>7}  {line}")


if __name__ == "__main__":
    main()
