"""Steady-state throughput of slabscope's backends and mlx-lm's BatchGenerator in ONE process: the model is loaded
once and every engine runs the scenario twice; the second run's figures are the steady state (the first pays
MLX's JIT compiles, e.g. ~1.5 s per fused-kernel variant, which a fresh process pays again).

Engines: slabscope dense, slab (fused decode per the decision rule), slab with SLABSCOPE_PAGED_ATTENTION_NATIVE=0
(gather), monolithic, slab with 128-block slabs (slab128_fused), and mlx-lm BatchGenerator; same prompts (the
workload's own source) and lengths. Per run: wall, prefill and decode tok/s, and the median / first decode step
time. ``--repeats N`` interleaves N rounds of every engine (round 1 pays the JIT compiles).

    python tests/gpu/steady_throughput.py --set n=8 --set prompt_tokens=4096 --set gen_tokens=32 \
        --model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ENGINES = (("dense", "dense", {}, {}), ("slab_fused", "slab", {}, {}),
           ("slab_gather", "slab", {"SLABSCOPE_PAGED_ATTENTION_NATIVE": "0"}, {}), ("monolithic", "monolithic", {}, {}),
           ("slab128_fused", "slab", {}, {"slab_blocks": 128}))


def _slabscope_run(spec, loaded, env: dict) -> dict:
    from app.workloads.runner import run_workload

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    events: list = []
    try:
        summary = run_workload(spec, events.append, loaded=loaded)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    decode = [e["wall_s"] for e in events if e.get("kind") == "step" and e.get("type") == "decode"]
    phase = next(iter(summary["phases"].values()))
    fused = summary.get("fused_decode", {})
    return {"wall_s": summary["wall_s"], "prefill_tok_s": phase["prefill_tok_s"],
            "decode_tok_s": phase["decode_tok_s"], "tok_s": summary["tok_s"],
            "decode_step_median_ms": statistics.median(decode) * 1e3 if decode else None,
            "decode_step_first_ms": decode[0] * 1e3 if decode else None,
            "decode_step_max_after_first_ms": max(decode[1:]) * 1e3 if len(decode) > 1 else None,
            "fused_layer_steps": fused.get("fused"), "gather_layer_steps": fused.get("gather")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="distinct_burst")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--model", default="synthetic:qwen3-0.6b")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--device", choices=("cpu", "gpu"), default=None)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile-out", default=None,
                        help="after the runs, one more slab_fused run under cProfile; top functions to this file")
    parser.add_argument("--engines", default=None, help="comma-separated subset of the engine names")
    args = parser.parse_args()
    from app.models import load_model
    from app.workloads.scenarios import parse_overrides
    from app.workloads.spec import RunSpec
    from mlxlm_baseline import run_batchgenerator, scenario_requests

    overrides = parse_overrides(args.set)
    loaded = load_model(args.model, dtype=args.dtype, device=args.device, seed=0)
    requests = scenario_requests(args.scenario, overrides, loaded, 0)
    results: dict = {name: [] for name, *_ in ENGINES}
    results["mlx_lm_batchgenerator"] = []
    engines = [e for e in ENGINES if args.engines is None or e[0] in args.engines.split(",")]
    for _ in range(args.repeats):
        for name, backend, env, spec_kwargs in engines:
            spec = RunSpec(scenario=args.scenario, backend=backend, model=args.model, dtype=args.dtype,
                           device=args.device, overrides=overrides, seed=0, **spec_kwargs)
            results[name].append(_slabscope_run(spec, loaded, env))
            print(name, json.dumps(results[name][-1]), file=sys.stderr, flush=True)
        run = run_batchgenerator(loaded, requests)
        steps = run.pop("generation_step_s")
        run["decode_step_median_ms"] = statistics.median(steps) * 1e3 if steps else None
        results["mlx_lm_batchgenerator"].append(run)
        print("mlx-lm", json.dumps({k: run[k] for k in ("wall_s", "tok_s", "prompt_tps", "generation_tps",
                                                          "decode_step_median_ms")}), file=sys.stderr, flush=True)
    print(json.dumps(results) if args.json else json.dumps(results, indent=1))
    if args.profile_out:
        _profile_slab(args, overrides, loaded)
    return 0


def _profile_slab(args, overrides, loaded) -> None:
    """One more slab_fused run (warm) under cProfile: where the host time of a decode step goes."""
    import cProfile
    import io
    import pstats

    from app.workloads.spec import RunSpec

    spec = RunSpec(scenario=args.scenario, backend="slab", model=args.model, dtype=args.dtype,
                   device=args.device, overrides=overrides, seed=0)
    profiler = cProfile.Profile()
    profiler.enable()
    result = _slabscope_run(spec, loaded, {})
    profiler.disable()
    text = io.StringIO()
    text.write(json.dumps(result) + "\n")
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
    with open(args.profile_out, "w") as f:
        f.write(text.getvalue())


if __name__ == "__main__":
    raise SystemExit(main())
