"""A load-time rehearsal of the run's first prefill and first decode steps, on throwaway state, through the run's
own backend, scheduler and engine code (GPU only).

Why: a fresh process pays MLX's first uses inside the run: cuDNN attention plans for every new key length, CUDA
graphs instantiated for every new topology, kernels loaded, cuBLAS algorithms picked. Measured on the H200
(``app/bench/device/fresh_anatomy.py``, burst, three fresh processes per engine at 0b984c8): the prefill of a
fresh process took 1.30-1.71 s against 0.63-0.91 s when the same process ran the same work again, and its first
decode step 69-104 ms against a ~10 ms median, for dense and slab alike. Those are costs of the process, not of
the KV layout; paid at load, a run's figures compare the layouts.

What it runs: the first decode batch of the scenario's first request phase (its first ``concurrency`` requests,
drawn from a source seeded like the run's: the same prompt and generation lengths) on a backend of the run's
kind. The first sequence's prompt is prefilled by the model, chunk by chunk (the chunk shapes the run's prefill
meets first); the others get zero K/V written through the same per-layer caches (their bytes do not matter to a
throwaway step, their shapes and the pool's layout do); then ``DECODE_STEPS`` decode steps of the whole batch
(the first builds its graph from host tokens, the next ones from the previous step's device tokens: the two
topologies a run's first decode steps build). Then everything is released and MLX's buffer cache emptied, so the
run starts from the memory state it had without a rehearsal. The run's model weights, pool, scheduler and prompt
source are not touched; a sampling run's random state is reseeded by the caller.

Covered: the first request phase's first batch. Not covered: a later phase's new shapes (``shared_prefix_burst``'s
burst of 6 after its one-request prefix phase, ``burst_then_idle``'s tail at concurrency 2): their first uses still
fall in the run, at that phase's first steps. Every shipped scenario with requests runs after a rehearsal on
every backend in ``tests/workloads/test_rehearsal.py`` (forced on the CPU).

MLX keeps 400 instantiated CUDA graphs by default, fewer than one burst's prefill goes through, so the rehearsed
decode graphs would be gone by the run's first decode step: ``app/models/mlx_env.py`` raises that limit for every
engine in the process, before mlx is imported.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

from app.workloads.prompts import make_source, phase_requests
from app.workloads.scheduler import PrefillPlan, Request

REHEARSAL_ENV = "SLABSCOPE_REHEARSAL"  # "0": no rehearsal (to measure a fresh process without it)
DECODE_STEPS = 3


@dataclass(frozen=True)
class RehearsalReport:
    """What a rehearsal ran and cost (the run's metadata carries it as ``rehearsal``)."""

    seconds: float
    batch: int             # sequences decoded together
    model_prefill_tokens: int  # prompt tokens the model prefilled (the first sequence's)
    zero_filled_tokens: int    # prompt tokens given zero K/V without the model (the others')
    decode_steps: int
    peak_active_bytes: int     # MLX's peak active memory during the rehearsal (weights included)

    def to_dict(self) -> dict:
        return asdict(self)


def wants_rehearsal(device: str | None) -> bool:
    """Rehearse on a GPU only (a CPU's first uses cost no compile worth a step) unless $SLABSCOPE_REHEARSAL=0."""
    return os.environ.get(REHEARSAL_ENV, "1") != "0" and runs_on_gpu(device)


def runs_on_gpu(device: str | None) -> bool:
    """The run's device is a GPU (``device`` as the spec names it; None: MLX's default device)."""
    import mlx.core as mx

    return device == "gpu" or (device is None and mx.default_device() == mx.gpu)


def first_batch_requests(scenario, loaded, seed: int) -> list[Request]:
    """The requests the run decodes first: the first request or conversation phase's first ``concurrency``
    requests, from a prompt source seeded like the run's (so the same lengths), stripped of follow-ups and kept
    K/V (a throwaway backend keeps nothing). Empty when the scenario has no such phase."""
    phase = next((p for p in scenario.phases if p.kind in ("requests", "conversation")), None)
    if phase is None:
        return []
    source = make_source(loaded, seed)
    longest = max((p.shared_prefix for p in scenario.phases), default=0)
    shared = source.tokens(longest) if longest else []  # drawn first, as WorkloadSession does
    requests = phase_requests(phase, source, first_id=0, shared=shared)[:max(1, phase.concurrency)]
    return [Request(r.req_id, list(r.prompt), r.max_new_tokens, r.phase) for r in requests]


def rehearse(engine, requests: list[Request], *, kv_heads: int, head_dim: int, dtype: str) -> RehearsalReport:
    """Run ``requests`` as the rehearsal above on ``engine`` (a throwaway ``Engine`` whose backend and scheduler
    nothing else uses), then release every sequence, close the backend and empty MLX's buffer cache. Mutates only
    the engine's backend and scheduler (and MLX's peak-memory counter, reset at the start through
    ``copy_meter.begin_peak_window``, which keeps the process's peak since start)."""
    import mlx.core as mx

    from pool.copy_meter import begin_peak_window

    t0 = time.perf_counter()
    mx.synchronize()
    begin_peak_window()  # the rehearsal's own peak; the process's peak since start (copy_meter.peak_memory) stays
    scheduler, backend = engine.scheduler, engine.backend
    scheduler.set_concurrency(len(requests))
    scheduler.submit(requests)
    scheduler.admit()
    first = scheduler.running[0]
    prefilled = filled = steps = 0
    try:
        while isinstance(plan := scheduler.plan(), PrefillPlan):
            if plan.seq is first:
                engine.step()  # the model's own chunk: plans this same chunk again
                prefilled += plan.num_tokens
            else:
                _zero_fill(backend, plan, kv_heads=kv_heads, head_dim=head_dim, dtype=getattr(mx, dtype))
                scheduler.complete_prefill(plan)
                filled += plan.num_tokens
        while steps < DECODE_STEPS and (result := engine.step()) is not None:
            steps += result.kind == "decode"
    finally:
        engine.settle()
        for seq in list(scheduler.running):
            scheduler.running.remove(seq)
            backend.release(seq)
        backend.close()
    mx.synchronize()
    peak = mx.get_peak_memory()
    return RehearsalReport(seconds=time.perf_counter() - t0, batch=len(requests), model_prefill_tokens=prefilled,
                           zero_filled_tokens=filled, decode_steps=steps, peak_active_bytes=int(peak))


def _zero_fill(backend, plan: PrefillPlan, *, kv_heads: int, head_dim: int, dtype) -> None:
    """Give ``plan``'s chunk zero K/V through the backend's own per-layer caches (the same writes, allocations and
    layout as the model's chunk would make), evaluated now."""
    import mlx.core as mx

    zeros = mx.zeros((1, kv_heads, plan.num_tokens, head_dim), dtype=dtype)
    caches = backend.prefill_caches(plan.seq, plan.start, plan.num_tokens)
    mx.eval([cache.update_and_fetch(zeros, zeros) for cache in caches])


def clear_after_rehearsal() -> None:
    """Hand the rehearsal's freed buffers back to the device: the run's footprint starts from an empty cache."""
    import mlx.core as mx

    mx.clear_cache()
