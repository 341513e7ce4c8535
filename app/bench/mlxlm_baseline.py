"""mlx-lm's own ``BatchGenerator`` on a slabscope scenario: the same model (same seeded weights), the same prompts
(the workload's own prompt source for the scenario and seed) and the same generation lengths, for ``slabscope bench
throughput``. Stop tokens are disabled so every request generates exactly its length, as in the workload.
Footprint: max(active + cache) and max RSS sampled by a thread (``sample_hz``) and after every generation step.
"""

from __future__ import annotations

import threading
import time


def scenario_requests(scenario_name: str, overrides: dict, loaded, seed: int) -> list:
    """The workload's requests for every phase, in submission order (mirrors WorkloadSession: one shared prefix
    drawn first when a phase asks for one, then each phase's requests from the same seeded source)."""
    from app.workloads.prompts import make_source, scenario_phase_requests
    from app.workloads.scenarios import load_scenario

    scenario = load_scenario(scenario_name, overrides)
    drawn = scenario_phase_requests(scenario, make_source(loaded, seed))
    return [request for _, requests in drawn for request in requests]


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
        while not self._stop.wait(self.period):
            self.sample()

    def __enter__(self):
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.sample()


def run_batchgenerator(loaded, requests, sample_hz: float = 100.0, seed: int = 0) -> dict:
    """One mlx-lm BatchGenerator run over ``requests`` (the workload's) on ``loaded``'s model; figures only.
    ``decode_step_s``: wall time between successive generated batches (the first is the first decode step)."""
    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator

    prompts = [list(r.prompt) for r in requests]
    max_tokens = [int(r.max_new_tokens) for r in requests]
    mx.random.seed(seed)
    gen = BatchGenerator(loaded.model, max_tokens=max(max_tokens), stop_tokens=None,
                         prefill_batch_size=len(prompts), completion_batch_size=len(prompts))
    generated, step_s = 0, []
    try:  # closed on a failure too (an out-of-memory mid-run): its caches go with it
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
    finally:
        gen.close()
    prompt_tokens = sum(len(p) for p in prompts)
    return {"wall_s": wall, "prompt_tokens": prompt_tokens, "generated_tokens": generated,
            "tok_s": (prompt_tokens + generated) / wall,
            "prefill_tok_s": stats.prompt_tokens / stats.prompt_time if stats.prompt_time else None,
            "decode_step_s": step_s[1:], "first_decode_step_s": step_s[1] if len(step_s) > 1 else None,
            "max_footprint_bytes": sampler.max_footprint, "max_rss_bytes": sampler.max_rss}
