"""mlx-lm's own ``BatchGenerator`` on a slabscope scenario: the same model (same seeded weights), the same prompts
(the workload's own prompt source for the scenario and seed) and the same generation lengths, for a throughput and
footprint baseline beside ``slabscope run``.

Reports wall time, prompt / generation tokens and tok/s (mlx-lm's own counters), and max(active + cache) and
max RSS sampled by a thread (``--sample-hz``, default 100 like the recordings it is compared with) and after every
generation step (its cost is inside the wall time). Stop tokens are disabled
so every request generates exactly its length, as in the workload.

    python tests/gpu/mlxlm_baseline.py --scenario distinct_burst --set n=8 --set prompt_tokens=4096 \
        --model synthetic:qwen3-0.6b --dtype bfloat16 --device gpu --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def scenario_requests(scenario_name: str, overrides: dict, loaded, seed: int) -> list:
    """The workload's requests for every phase, in submission order (mirrors WorkloadSession: one shared prefix
    drawn first when a phase asks for one, then each phase's requests from the same seeded source)."""
    from app.workloads.prompts import make_source, phase_requests
    from app.workloads.scenarios import load_scenario

    scenario = load_scenario(scenario_name, overrides)
    source = make_source(loaded, seed)
    longest = max((p.shared_prefix for p in scenario.phases), default=0)
    shared = source.tokens(longest) if longest else []
    requests, next_id = [], 0
    for phase in scenario.phases:
        requests += phase_requests(phase, source, first_id=next_id, shared=shared)
        next_id += max(phase.count, phase.turns)
    return requests


class FootprintSampler:
    """max(active + cache) and max RSS from a background thread (and on demand)."""

    def __init__(self, mx, period_s: float = 0.01):
        import psutil

        self.mx, self.period = mx, period_s
        self.process = psutil.Process()
        self.max_footprint = self.max_rss = self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        self.max_footprint = max(self.max_footprint, self.mx.get_active_memory() + self.mx.get_cache_memory())
        self.max_rss = max(self.max_rss, self.process.memory_info().rss)
        self.count += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.period)

    def __enter__(self):
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.sample()


def run_batchgenerator(loaded, requests, sample_hz: float = 100.0, seed: int = 0) -> dict:
    """One mlx-lm BatchGenerator run over ``requests`` (the workload's) on ``loaded``'s model; figures only."""
    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator

    prompts = [list(r.prompt) for r in requests]
    max_tokens = [int(r.max_new_tokens) for r in requests]
    mx.random.seed(seed)
    gen = BatchGenerator(loaded.model, max_tokens=max(max_tokens), stop_tokens=None,
                         prefill_batch_size=len(prompts), completion_batch_size=len(prompts))
    generated, step_s = 0, []
    with FootprintSampler(mx, 1.0 / sample_hz) as sampler:
        start = time.perf_counter()
        gen.insert(prompts, max_tokens)
        with gen.stats() as stats:
            last = time.perf_counter()
            while responses := gen.next_generated():
                now = time.perf_counter()
                step_s.append(now - last)
                last = now
                generated += len(responses)
                sampler.sample()
        wall = time.perf_counter() - start
    gen.close()
    prompt_tokens = sum(len(p) for p in prompts)
    return {"engine": "mlx-lm BatchGenerator", "model": loaded.name, "dtype": loaded.dtype,
            "device": str(mx.default_device()), "requests": len(prompts), "prompt_tokens": prompt_tokens,
            "generated_tokens": generated, "wall_s": wall, "tok_s": (prompt_tokens + generated) / wall,
            "prompt_tps": stats.prompt_tokens / stats.prompt_time if stats.prompt_time else None,
            "generation_tps": stats.generation_tps, "prompt_time_s": stats.prompt_time,
            "generation_time_s": stats.generation_time, "generation_step_s": step_s[1:],
            "max_active_plus_cache_bytes": sampler.max_footprint, "max_rss_bytes": sampler.max_rss,
            "mx_peak_bytes": mx.get_peak_memory(), "weight_bytes": loaded.weight_bytes, "samples": sampler.count}


def run_baseline(args) -> dict:
    from app.models import load_model
    from app.workloads.scenarios import parse_overrides

    loaded = load_model(args.model, dtype=args.dtype, device=args.device, seed=args.seed)
    requests = scenario_requests(args.scenario, parse_overrides(args.set), loaded, args.seed)
    result = run_batchgenerator(loaded, requests, args.sample_hz, args.seed)
    result.pop("generation_step_s")
    return {**result, "scenario": args.scenario, "overrides": args.set}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="distinct_burst")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--model", default="synthetic:qwen3-0.6b")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--device", choices=("cpu", "gpu"), default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-hz", type=float, default=100.0,
                        help="sampler thread rate (default 100, the rate session B records slabscope runs at)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run_baseline(args)
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
