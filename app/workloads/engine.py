"""Runs the scheduler's plans on a model and a KV backend: one forward pass per plan.

Prefill chunks run the model's trunk only (``model.model``): no logits are computed for prompt positions, since
none is sampled there. Decode steps run the full model on one token per sequence and sample from those logits
only. This mirrors mlx-lm's ``generate_step`` (the last prompt token is the first decode input), which is why a
single prompt reproduces stock generation exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import mlx.core as mx

from app.workloads.scheduler import DecodePlan, PrefillPlan, Scheduler


@dataclass
class StepResult:
    """What one forward pass did (for events and summaries)."""

    kind: str  # "prefill" | "decode"
    batch: int
    num_tokens: int
    wall_s: float
    finished: list  # sequences finished by this step
    events: list = field(default_factory=list)  # backend events of this step (fused decisions, gather runs)


def make_sampler(temperature: float = 0.0, top_p: float = 0.0) -> Callable[[mx.array], mx.array]:
    """Greedy (temperature 0) or temperature/top-p sampling over log-probabilities (mlx-lm's samplers)."""
    from mlx_lm.sample_utils import make_sampler as _mlx_make_sampler

    return _mlx_make_sampler(temp=temperature, top_p=top_p)


class Engine:
    """Owns nothing persistent but the model handle; mutates the backend (K/V) and the scheduler per step.

    ``logits_hook(seq_ids, logits)`` (tests/parity) receives every decode step's [B, vocab] logits.
    """

    def __init__(self, model, backend, scheduler: Scheduler, *, sampler=None, logits_hook=None):
        self.model = model
        self.backend = backend
        self.scheduler = scheduler
        self.sampler = sampler or make_sampler()
        self.logits_hook = logits_hook
        self._trunk = getattr(model, "model", None)

    def step(self) -> StepResult | None:
        """Admit, plan and run one forward pass; None when nothing is running or waiting to be admitted."""
        self.scheduler.admit()
        plan = self.scheduler.plan()
        if plan is None:
            return None
        if isinstance(plan, PrefillPlan):
            return self._prefill(plan)
        return self._decode(plan)

    def _prefill(self, plan: PrefillPlan) -> StepResult:
        t0 = time.perf_counter()
        caches = self.backend.prefill_caches(plan.seq, plan.start, plan.num_tokens)
        inputs = mx.array(plan.seq.tokens[plan.start:plan.start + plan.num_tokens])[None]
        # the trunk alone: its hidden states feed nothing but the cache writes
        out = self._trunk(inputs, cache=caches) if self._trunk is not None else self.model(inputs, cache=caches)
        mx.eval(out, *_cache_state(caches))
        self.scheduler.complete_prefill(plan)
        return StepResult("prefill", 1, plan.num_tokens, time.perf_counter() - t0, [])

    def _decode(self, plan: DecodePlan) -> StepResult:
        t0 = time.perf_counter()
        caches = self.backend.decode_caches(plan.seqs)
        inputs = mx.array([[s.tokens[s.num_cached]] for s in plan.seqs])
        logits = self.model(inputs, cache=caches)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        sampled = self.sampler(logprobs)
        mx.eval(sampled, logits, *_cache_state(caches))
        events = self.backend.finish_decode()  # before completion: release may drop what the events describe
        if self.logits_hook is not None:
            self.logits_hook([s.seq_id for s in plan.seqs], logits)
        finished = self.scheduler.complete_decode(plan, sampled.tolist())
        return StepResult("decode", len(plan.seqs), len(plan.seqs), time.perf_counter() - t0, finished, events)


def _cache_state(caches: list) -> list:
    """Arrays a dense cache holds (so its updates are evaluated now, not folded into a later step's graph)."""
    out = []
    for cache in caches:
        keys = getattr(cache, "keys", None)
        if isinstance(keys, mx.array):
            out.extend([keys, cache.values])
    return out
