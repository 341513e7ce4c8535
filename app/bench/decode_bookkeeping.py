"""Host time of the slab pool's per-step decode bookkeeping, without a model: what a decode step of B sequences
asks of the pool before and after the model runs (issue 13, item 5: the slab decode step is host-bound on a GPU).

A pool of ``--layers`` layers holds ``--batch`` sequences of ``--context`` tokens (tiny K/V rows: only the Python
work is timed); each figure is the best of 7 repeats of ``--number`` calls, in microseconds per call:

* ``prepare_write x B``: the step's ``prepare_write`` of one token per sequence (the span inside blocks the
  sequence owns alone: the common decode case);
* ``write_slots``: where each sequence's token goes (resolved once, for every layer);
* ``fused_decision``: the step's fused-kernel decision (one, for every layer);
* ``step_view``: the rows, lengths and logical starts every layer's launch reads (one view per step);
* ``run_counts``: the same-slab runs per sequence of the step (from its view).

``per step`` is their sum: what the bookkeeping costs a decode step. The pool keeps one row space (every layer holds
a block at the same row), so none of these grows with ``--layers``; compare ``--layers 1`` and ``--layers 28``:

    slabscope bench bookkeeping --layers 28 --batch 16 --context 2300

Runs anywhere (CPU is fine: no kernel runs). To compare commits, run it in a worktree of each (an older one without
this command: copy this file and ``app/commands/bench_bookkeeping.py`` in).
"""

from __future__ import annotations

import timeit


def build_pool(layers: int, batch: int, context: int):
    """A slab pool with ``batch`` sequences of ``context`` tokens written in every layer (one KV head of 8)."""
    from app.models.blas import enable_openblas

    enable_openblas()
    import mlx.core as mx

    from pool import PagedKVPool, PoolConfig

    pool = PagedKVPool(PoolConfig(num_layers=layers, block_size=16, slab_blocks=32))
    rows = mx.zeros((1, context, 1, 8), dtype=mx.float32)
    for seq_id in range(batch):
        pool.add_sequence(seq_id)
        pool.prepare_write(seq_id, 0, context)
        slots = pool.write_slots([seq_id], [0], context)
        for layer in range(layers):
            pool.write(layer, slots, rows, rows)
    return pool


def timings(pool, batch: int, context: int, number: int) -> dict[str, float]:
    """{figure: best microseconds per call} of the step's bookkeeping calls (see the module docstring)."""
    from app.workloads.paged_cache import PagedStep

    seq_ids, starts = list(range(batch)), [context - 1] * batch
    step = PagedStep(pool, seq_ids, starts, 1, batched=True)
    step.view  # noqa: B018 - built once, as the step's plan builds it; run_counts reads it
    calls = {
        f"prepare_write x {batch}": lambda: [pool.prepare_write(s, context - 1, 1) for s in seq_ids],
        "write_slots": lambda: pool.write_slots(seq_ids, starts, 1),
        "fused_decision": lambda: pool.fused_decision(dtype="float32", head_dim=8, batch_size=batch,
                                                      context_len=context),
        "step_view": lambda: pool.step_view(seq_ids),
        "run_counts": step.run_counts,
    }
    return {name: min(timeit.repeat(fn, number=number, repeat=7)) / number * 1e6 for name, fn in calls.items()}


MAX_TOKEN_ROWS = 1 << 26  # layers x sequences x tokens: 64 B of K/V each, so at most 4 GiB of pool


def run_bookkeeping_bench(layers: int, batch: int, context: int, number: int) -> dict:
    """The figures (``timings``) with what they were measured on. ValueError (nothing built) when the pool would
    hold more than MAX_TOKEN_ROWS token rows."""
    if layers * batch * context > MAX_TOKEN_ROWS:
        raise ValueError(f"{layers} layers x {batch} sequences x {context} tokens is "
                         f"{layers * batch * context:,} token rows; at most {MAX_TOKEN_ROWS:,}")
    pool = build_pool(layers, batch, context)
    figures = timings(pool, batch, context, number)
    return {"layers": layers, "batch": batch, "context": context, "number": number, "us_per_call": figures,
            "us_per_step": sum(figures.values())}


def format_report(result: dict) -> str:
    lines = [f"decode bookkeeping of one step: {result['layers']} layers, {result['batch']} sequences of "
             f"{result['context']} tokens; best of 7 x {result['number']} calls, us per call"]
    lines += [f"{name:22s} {us:8.1f} us" for name, us in result["us_per_call"].items()]
    lines.append(f"{'per step':22s} {result['us_per_step']:8.1f} us")
    return "\n".join(lines)
