"""A load-time rehearsal of the run's first prefill and first decode steps, on throwaway state, through the run's
own backend, scheduler and engine code (GPU only).

Why: a fresh process pays MLX's first uses inside the run: cuDNN attention plans for every new key length, CUDA
graphs instantiated for every new topology, kernels loaded, cuBLAS algorithms picked. Measured on the H200
(``lab/first_step/fresh_anatomy.py``, burst, three fresh processes per engine at 0b984c8): the prefill of a
fresh process took 1.30-1.71 s against 0.63-0.91 s when the same process ran the same work again, and its first
decode step 69-104 ms against a ~10 ms median, for dense and slab alike. Those are costs of the process, not of
the KV layout; paid at load, a run's figures compare the layouts.

What it runs, per request phase: the phase's first decode batch (its first ``concurrency`` requests, drawn from a
source seeded like the run's: the same prompt and generation lengths) on a backend of the run's kind. The first
sequence's prompt is prefilled by the model, chunk by chunk (the chunk shapes the run's prefill meets first), with
the sequences the scheduler batches with it (their [B, L] shapes are the run's); the others get zero K/V written
through the same per-layer caches (their bytes do not matter to a throwaway step, their
shapes and the pool's layout do); then ``DECODE_STEPS`` decode steps of the whole batch (the first builds its graph
from host tokens, the next ones from the previous step's device tokens: the two topologies a run's first decode
steps build). Then everything is released and MLX's buffer cache emptied, so the run starts from the memory state it
had without a rehearsal. The run's model weights, pool, scheduler and prompt source are not touched; a sampling
run's random state is reseeded by the caller.

Every request or conversation phase gets its first batch rehearsed the same way, in the run's order, on the same
throwaway backend (a later phase meets what the earlier ones left, e.g. ``shared_prefix_burst``'s burst finds the
prefix its one-request phase cached), so a later phase's new shapes (that burst of 6, ``burst_then_idle``'s tail at
concurrency 2) are not first met in the run either. The lengths are the run's own up to the first conversation
phase's follow-up turns (drawn during a run, not by the rehearsal). Every shipped scenario with requests runs after
a rehearsal on every backend in ``tests/workloads/test_rehearsal.py`` (forced on the CPU).

MLX keeps 400 instantiated CUDA graphs by default, fewer than one burst's prefill goes through, so the rehearsed
decode graphs would be gone by the run's first decode step: ``app/models/mlx_env.py`` raises that limit for every
engine in the process, before mlx is imported.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

from app.workloads.prompts import make_source, scenario_phase_requests
from app.workloads.scheduler import PrefillPlan, Request

REHEARSAL_ENV = "SLABSCOPE_REHEARSAL"  # "0": no rehearsal (to measure a fresh process without it)
DECODE_STEPS = 3


@dataclass(frozen=True)
class RehearsalReport:
    """What a rehearsal ran and cost (the run's metadata carries it as ``rehearsal``)."""

    seconds: float
    batches: tuple[int, ...]   # sequences decoded together, per rehearsed phase
    model_prefill_tokens: int  # prompt tokens the model prefilled (each batch's first sequence's, and those batched
                               # with its chunks)
    zero_filled_tokens: int    # prompt tokens given zero K/V without the model (the others')
    decode_steps: int          # over all batches
    peak_active_bytes: int     # MLX's peak active memory during the rehearsal (weights included)

    def to_dict(self) -> dict:
        return {**asdict(self), "batches": list(self.batches)}


def wants_rehearsal(device: str | None) -> bool:
    """Rehearse on a GPU only (a CPU's first uses cost no compile worth a step) unless $SLABSCOPE_REHEARSAL=0."""
    return os.environ.get(REHEARSAL_ENV, "1") != "0" and runs_on_gpu(device)


def runs_on_gpu(device: str | None) -> bool:
    """The run's device is a GPU (``device`` as the spec names it; None: MLX's default device)."""
    import mlx.core as mx

    return device == "gpu" or (device is None and mx.default_device() == mx.gpu)


def rehearsal_batches(scenario, loaded, seed: int) -> list[list[Request]]:
    """Per request or conversation phase, in the run's order, the requests it decodes first: its first
    ``concurrency`` requests, drawn as the run draws them (``prompts.scenario_phase_requests``, from a source seeded
    like the run's), stripped of follow-ups and kept K/V (a throwaway backend keeps nothing). Empty when the
    scenario has no such phase."""
    drawn = scenario_phase_requests(scenario, make_source(loaded, seed))
    return [[Request(r.req_id, list(r.prompt), r.max_new_tokens, r.phase) for r in requests[:max(1, phase.concurrency)]]
            for phase, requests in drawn if requests]


def rehearse(engine, batches: list[list[Request]], *, kv_heads: int, head_dim: int,
             dtype: str) -> RehearsalReport:
    """Run each batch as the rehearsal above on ``engine`` (a throwaway ``Engine`` whose backend and scheduler
    nothing else uses), releasing its sequences before the next; then close the backend. Mutates only the engine's
    backend and scheduler (and MLX's peak-memory counter, reset at the start through
    ``copy_meter.begin_peak_window``, which keeps the process's peak since start)."""
    import mlx.core as mx

    from pool.copy_meter import begin_peak_window

    t0 = time.perf_counter()
    mx.synchronize()
    begin_peak_window()  # the rehearsal's own peak; the process's peak since start (copy_meter.peak_memory) stays
    totals = [0, 0, 0]  # model-prefilled tokens, zero-filled tokens, decode steps
    try:
        for requests in batches:
            try:
                counts = _rehearse_batch(engine, requests, kv_heads=kv_heads, head_dim=head_dim,
                                         dtype=getattr(mx, dtype))
            finally:  # before the next batch, and on an error too
                _release_running(engine)
            totals = [a + b for a, b in zip(totals, counts)]
    finally:
        engine.backend.close()
    mx.synchronize()
    return RehearsalReport(seconds=time.perf_counter() - t0, batches=tuple(len(b) for b in batches),
                           model_prefill_tokens=totals[0], zero_filled_tokens=totals[1], decode_steps=totals[2],
                           peak_active_bytes=int(mx.get_peak_memory()))


def _rehearse_batch(engine, requests: list[Request], *, kv_heads: int, head_dim: int,
                    dtype) -> tuple[int, int, int]:
    """One batch: admitted together, the first sequence prefilled by the model, the others zero-filled, then
    ``DECODE_STEPS`` decode steps. Returns (model-prefilled tokens, zero-filled tokens, decode steps)."""
    scheduler, backend = engine.scheduler, engine.backend
    scheduler.set_concurrency(len(requests))
    scheduler.submit(requests)
    scheduler.admit()
    first = scheduler.running[0]
    prefilled = filled = steps = 0
    while isinstance(plan := scheduler.plan(), PrefillPlan):
        if first in plan.seqs:
            engine.step()  # the model's own chunk (with the sequences it batches): plans this same chunk again
            prefilled += plan.total_tokens
        else:
            _zero_fill(backend, plan, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype)
            scheduler.complete_prefill(plan)
            filled += plan.total_tokens
    while steps < DECODE_STEPS and (result := engine.step()) is not None:
        steps += result.kind == "decode"
    return prefilled, filled, steps


def _release_running(engine) -> None:
    """Wait for the engine's dispatched work, then release every running sequence (a released sequence's blocks
    go to the throwaway backend's prefix cache, as a finished one's would) and drop what still waits."""
    engine.settle()
    scheduler = engine.scheduler
    for seq in list(scheduler.running):
        scheduler.running.remove(seq)
        engine.backend.release(seq)
    scheduler.waiting.clear()


def _zero_fill(backend, plan: PrefillPlan, *, kv_heads: int, head_dim: int, dtype) -> None:
    """Give ``plan``'s chunk zero K/V through the backend's own per-layer caches (the same writes, allocations and
    layout as the model's chunk would make), evaluated now."""
    import mlx.core as mx

    zeros = mx.zeros((len(plan.seqs), kv_heads, plan.num_tokens, head_dim), dtype=dtype)
    caches = backend.prefill_caches(plan.seqs, plan.start, plan.num_tokens)
    mx.eval([cache.update_and_fetch(zeros, zeros) for cache in caches])


def clear_after_rehearsal() -> None:
    """Hand the rehearsal's freed buffers back to the device: the run's footprint starts from an empty cache."""
    import mlx.core as mx

    mx.clear_cache()
