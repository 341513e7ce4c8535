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

from app.workloads.layer_starts import LayerGate, starting_under
from app.workloads.sampling import sample_batch
from app.workloads.scheduler import DecodeBatch, PrefillPlan, Scheduler
from app.workloads.shrink_points import ShrinkTally, timed_point


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

    Decode steps are pipelined like mlx-lm's ``generate_step``: when the step just dispatched is not expected to
    change the batch (no sequence reaches its fixed length, nothing can be admitted; a stop token drops its row of
    the step after it), the next step's graph is built from the still-lazy sampled tokens and handed to
    ``mx.async_eval`` *before* this step's tokens are materialised for bookkeeping, so host-side Python overlaps
    device work. Each ``step()`` call still
    completes exactly one forward pass; the next one may already be in flight (``_inflight``), in which case the
    backend already holds K/V room (and, on the pool, blocks) for one token more than ``seq.num_cached``.
    Prefill chunks overlap the same way: each is dispatched with ``mx.async_eval`` and the previous one is
    awaited after it, so a prefill step's wall time is its host work plus the wait for the chunk before it.

    Serving: requests may be submitted to the scheduler between any two ``step()`` calls (they join at the next
    step that is not pipelined); ``cancel`` ends requests between steps, first completing an in-flight step that
    writes for one of them. Each request samples by its own ``Request.sampling`` (``app.workloads.sampling``;
    None: ``sampler``).
    """

    def __init__(self, model, backend, scheduler: Scheduler, *, sampler=None, logits_hook=None, cache_trim=None,
                 inflight_bound=None):
        self.model = model
        self.cache_trim = cache_trim  # CacheTrim: releases MLX's cache before a prefill chunk when over budget
        self.inflight_bound = inflight_bound  # InflightBound: what a prefill chunk's encoding may hold in flight
        self.backend = backend
        self.scheduler = scheduler
        self.sampler = sampler or make_sampler()
        self.logits_hook = logits_hook
        self._trunk = getattr(model, "model", None)
        self._inflight: _Dispatched | None = None  # decode step dispatched (async_eval) but not yet completed
        self._chain_t0 = 0.0  # when the previous pipelined step completed (its successor's wall clock starts)
        self._prefill_inflight: mx.array | None = None  # last prefill chunk's output, dispatched, maybe running
        self.shrink_tally = ShrinkTally()  # the backend's shrink points after each step (and the runner's idle ones)

    def step(self) -> StepResult | None:
        """Complete one forward pass (the in-flight decode step if any, else admit, plan and run one), then a
        shrink point of the backend (its time counts in the step's wall time: it is work on the serving path, and
        the next pipelined step's clock starts after it); None when nothing is running or waiting."""
        result = self._forward()
        if result is None:
            return None
        events, seconds = timed_point(self.backend, self.shrink_tally, result.kind == "decode")
        result.events.extend(events)
        result.wall_s += seconds
        if self._inflight is not None:
            self._chain_t0 = time.perf_counter()
        return result

    def settle(self) -> None:
        """Wait for the work dispatched but not completed (a pipelined decode step, a prefill chunk) without
        recording it: for a run that stops early and drops its scheduler and backend (the load-time rehearsal)."""
        pending = [self._inflight.sampled] if self._inflight is not None else []
        if self._prefill_inflight is not None:
            pending.append(self._prefill_inflight)
        if pending:
            mx.eval(*pending)
        self._inflight = self._prefill_inflight = None

    def cancel(self, req_ids) -> StepResult | None:
        """End the requests ``req_ids`` (waiting or running; unknown ids are ignored) and release their K/V. A
        pipelined decode step in flight that writes for one of them is completed first, without dispatching its
        successor: its StepResult is returned (its tokens are real for every other sequence of its batch and must
        be reported like any step's), else None."""
        ids = set(req_ids)
        drained = None
        inflight = self._inflight
        if inflight is not None and any(s.request.req_id in ids for s in inflight.plan.seqs):
            drained = self._complete(inflight, self._chain_t0, pipeline=False)
        for req_id in ids:
            self.scheduler.cancel(req_id)
        return drained

    def _forward(self) -> StepResult | None:
        """One forward pass, as ``step`` describes (without the shrink point)."""
        if self._inflight is not None:
            return self._complete(self._inflight, self._chain_t0)
        self.scheduler.admit()
        plan = self.scheduler.plan()
        if plan is None:
            if self._prefill_inflight is not None:  # idle: let the last prefill chunk finish before reporting
                mx.eval(self._prefill_inflight)
                self._prefill_inflight = None
            return None
        if isinstance(plan, PrefillPlan):
            return self._prefill(plan)
        t0 = time.perf_counter()
        starts = [s.num_cached for s in plan.seqs]
        inputs = mx.array([[s.tokens[s.num_cached]] for s in plan.seqs])
        return self._complete(self._dispatch(plan, starts, inputs), t0)

    def _prefill(self, plan: PrefillPlan) -> StepResult:
        t0 = time.perf_counter()
        caches = self.backend.prefill_caches(plan.seqs, plan.start, plan.num_tokens)
        inputs = _prefill_inputs(plan)
        # the trunk alone: its hidden states feed nothing but the cache writes; layers start as built, bounded
        gate = self._layer_gate()
        with starting_under(gate):
            out = self._trunk(inputs, cache=caches) if self._trunk is not None else self.model(inputs, cache=caches)
        if gate is not None:
            self.inflight_bound.layer_start_waits += gate.waits
        # route events; checks that a paged chunk's layers all attended through the paged SDPA
        events = self.backend.finish_prefill() if hasattr(self.backend, "finish_prefill") else []
        trim = self.cache_trim
        if trim is not None and trim.due(self._projected_tokens()):
            # the previous chunks' attention temporaries (a new size each chunk) piled up in MLX's cache: drain the
            # chunk in flight, then trim with nothing running (see app/workloads/cache_trim.py)
            if self._prefill_inflight is not None:
                mx.eval(self._prefill_inflight)
                self._prefill_inflight = None
            trim.trim()
        # Pipelined like decode: start this chunk, then wait for the previous one, so the host builds chunk n+1
        # while the device runs chunk n (at most two chunks in flight; nothing on the host reads their results).
        self._start_chunk(out, caches)
        previous, self._prefill_inflight = self._prefill_inflight, out
        if previous is not None:
            mx.eval(previous)
        self.scheduler.complete_prefill(plan)
        if self.scheduler.decode_comes_next():
            # The last chunk's device time is this prefill's: left in flight, the first decode step's clock counted
            # it (25-30 ms of a 4096-token chunk on the H200, against a ~10 ms decode step). Costs the overlap of
            # that chunk with the first decode step's graph build, once per switch from prefill to decode.
            mx.eval(out)
            self._prefill_inflight = None
        return StepResult("prefill", len(plan.seqs), plan.total_tokens, time.perf_counter() - t0, [], events)

    def _layer_gate(self) -> LayerGate | None:
        """The gate a prefill chunk's layer starts go through (app/workloads/layer_starts.py): the in-flight bound
        with the backend's held bytes at each start, waiting first on the chunk still in flight; None when the run
        has no bound."""
        bound = self.inflight_bound
        if bound is None or not bound.active:
            return None
        return LayerGate(bound, self.backend.held_bytes, self._prefill_inflight)

    def _start_chunk(self, out: mx.array, caches: list) -> None:
        """Encode and start a prefill chunk (``mx.async_eval``), under the in-flight bound when the run has one:
        the encoding waits for older work whenever the chunk's temporaries would pass it."""
        bound = self.inflight_bound
        if bound is None or not bound.active:  # (no held-bytes count for a bound that is off)
            mx.async_eval(out, *_cache_state(caches))
            return
        with bound.encoding(self.backend.held_bytes()):
            mx.async_eval(out, *_cache_state(caches))

    def _projected_tokens(self) -> int:
        """K/V tokens the running sequences will hold at their final lengths (the last sampled token is never
        cached): what the trim's budget is counted on, so it is the run's peak from the first chunk on and early
        chunks, whose K/V is still small, do not trim (each trim waits for the device) for a footprint the end of
        the prefill exceeds anyway."""
        return sum(s.request.final_cached_tokens for s in self.scheduler.running)

    def _dispatch(self, plan: DecodeBatch, starts: list[int], inputs: mx.array) -> _Dispatched:
        """Build one decode step's graph (sequence i writes at ``starts[i]``; ``inputs`` [B, 1], possibly lazy)
        and start evaluating it. Mutates the backend (K/V room, fused decisions); takes the step's events now,
        while its ``PagedStep`` is still the backend's current one."""
        self._prefill_inflight = None  # decode runs after it on the same stream
        caches = self.backend.decode_caches(plan.seqs, starts)
        logits = self.model(inputs, cache=caches)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        sampled = self._sample(plan, starts, logprobs)
        mx.async_eval(sampled, logits, *_cache_state(caches))
        return _Dispatched(plan, starts, logits, sampled, self.backend.finish_decode())

    def _sample(self, plan: DecodeBatch, starts: list[int], logprobs: mx.array) -> mx.array:
        """The step's tokens: the engine's sampler for the batch, or each request's own (``Request.sampling``),
        drawing the token whose index in the request's output follows from its write position."""
        settings = [s.request.sampling for s in plan.seqs]
        if all(setting is None for setting in settings):
            return self.sampler(logprobs)
        indices = [start - s.prefill_end for s, start in zip(plan.seqs, starts)]
        return sample_batch(logprobs, settings, indices, self.sampler)

    def _complete(self, step: _Dispatched, t0: float, pipeline: bool = True) -> StepResult:
        """Dispatch the successor of ``step`` when the batch cannot change (and ``pipeline``), then materialise
        ``step``'s tokens and record them (scheduler, logits hook). Wall time runs from ``t0`` (the call's start, or
        the previous pipelined step's completion, so time spent outside ``step()`` while the device works is
        counted)."""
        self._inflight = None
        if pipeline and self._batch_unchanged_after(step.plan):
            starts = [n + 1 for n in step.starts]
            self._inflight = self._dispatch(step.plan, starts, step.sampled[:, None])
        tokens = step.sampled.tolist()  # waits for this step only
        live = [i for i, s in enumerate(step.plan.seqs) if not s.finished]  # a row past a stop token is dropped
        if self.logits_hook is not None:
            rows = step.logits if len(live) == len(tokens) else step.logits[mx.array(live)]
            self.logits_hook([step.plan.seqs[i].seq_id for i in live], rows)
        finished = self.scheduler.complete_decode(step.plan, tokens)
        now = time.perf_counter()
        self._chain_t0 = now
        return StepResult("decode", len(live), len(live), now - t0, finished, step.events)

    def _batch_unchanged_after(self, plan: DecodeBatch) -> bool:
        """True when completing ``plan`` is expected to leave the next plan as it is: no sequence reaches its fixed
        length at this token, and nothing waits that admission could take. A stop token or stop condition is
        unknown until sampled: the successor is dispatched anyway (stops are rare) and, when one hits, the stopped
        sequence's row of the successor is dropped (``_complete``; the scheduler skips finished sequences) and the
        pipeline restarts from the new batch. A conversation turn that keeps its K/V is never run past its end."""
        scheduler = self.scheduler
        if scheduler.may_admit():
            return False
        running = scheduler.running
        if len(plan.seqs) != len(running) or any(a is not b for a, b in zip(plan.seqs, running)):
            return False
        return all(len(s.generated) + 1 < s.request.max_new_tokens
                   and not (s.request.keep_kv and (s.request.stop_tokens or s.request.stop_when is not None))
                   for s in plan.seqs)


@dataclass
class _Dispatched:
    """A decode step whose graph is built and evaluating; its tokens are not yet recorded."""

    plan: DecodeBatch
    starts: list[int]
    logits: mx.array
    sampled: mx.array
    events: list


def _prefill_inputs(plan: PrefillPlan) -> mx.array:
    """The chunk's token ids, [B, L]: row i is sequence i's prompt from ``plan.start``."""
    end = plan.start + plan.num_tokens
    return mx.array([seq.tokens[plan.start:end] for seq in plan.seqs])


def _cache_state(caches: list) -> list:
    """Arrays a dense cache holds (so its updates are evaluated now, not folded into a later step's graph)."""
    out = []
    for cache in caches:
        keys = getattr(cache, "keys", None)
        if isinstance(keys, mx.array):
            out.extend([keys, cache.values])
    return out
