"""Batched prefill (``prefill_batch_tokens``): sequences whose next chunk has the same start and length prefill in one
forward. Slab, monolithic and dense run the same [B, L] arithmetic, so their logits stay byte-identical; against
one sequence per step (other matmul shapes, so other summation orders) the tokens are identical and the logits
within the float32 reorder tolerance."""

from __future__ import annotations

import pytest

from probes.events import Step

from .helpers import assert_same_logits, assert_within_reorder_tolerance, burst_toml, run_backend, write_scenario

# ragged prompts in 8-token chunks: the sequences prefill together, then part at their last, shorter chunks (the
# dense backend regroups its caches there, copying the histories of the sequences that go on together)
RAGGED = dict(n=5, concurrency=5, prompt_tokens="[10, 40]", gen_tokens="4")
POOL = dict(block_size=4, slab_blocks=2, prefill_chunk=8)


def _prefill_batches(events) -> list[int]:
    return [e.batch for e in events if isinstance(e, Step) and e.type == "prefill"]


@pytest.mark.numerics
def test_batched_prefill_is_byte_identical_across_backends(tiny_llama, tmp_path, monkeypatch):
    from pool.pool import PagedKVPool

    one_read = []  # chunks whose histories were read as one batch (whole blocks): the rest were gathered each
    original = PagedKVPool.gather_batch
    monkeypatch.setattr(PagedKVPool, "gather_batch",
                        lambda pool, *a, **kw: one_read.append(r := original(pool, *a, **kw)) or r)
    scenario = write_scenario(tmp_path, burst_toml(**RAGGED))
    runs = {backend: run_backend(tiny_llama, scenario, backend, prefill_batch_tokens=64, **POOL)
            for backend in ("slab", "monolithic", "dense")}
    assert any(r is not None for r in one_read)
    batches = _prefill_batches(runs["slab"][1])
    assert max(batches) == 5 and 1 in batches, batches  # all five together first, alone at the ragged ends
    assert _prefill_batches(runs["dense"][1]) == batches
    assert_same_logits(runs["slab"][2], runs["dense"][2], "batched prefill: slab vs dense")
    assert_same_logits(runs["monolithic"][2], runs["dense"][2], "batched prefill: monolithic vs dense")


@pytest.mark.numerics
@pytest.mark.parametrize("backend", ["slab", "dense"])
def test_batched_prefill_gives_the_tokens_of_one_sequence_per_step(backend, tiny_llama, tmp_path):
    import mlx.core as mx

    scenario = write_scenario(tmp_path, burst_toml(**RAGGED))
    batched = run_backend(tiny_llama, scenario, backend, prefill_batch_tokens=64, **POOL)
    alone = run_backend(tiny_llama, scenario, backend, prefill_batch_tokens=0, **POOL)
    assert set(_prefill_batches(alone[1])) == {1} and max(_prefill_batches(batched[1])) > 1
    assert len(batched[2]) == len(alone[2])
    for step, ((ids, got), (ids_alone, ref)) in enumerate(zip(batched[2], alone[2])):
        assert ids == ids_alone
        assert mx.array_equal(got.argmax(axis=-1), ref.argmax(axis=-1)), f"{backend}: tokens differ at step {step}"
        assert_within_reorder_tolerance(got, ref, f"{backend}: batched vs one-per-step prefill, step {step}")


def test_the_budget_comes_from_the_flag_the_scenario_or_the_device(tmp_path):
    from app.workloads.spec import RunSpec, prefill_batch_tokens_for, resolved_pool_params

    params = resolved_pool_params(RunSpec(), {})
    assert params["prefill_batch_tokens"] is None
    assert prefill_batch_tokens_for(params, on_gpu=True) == 8192 and prefill_batch_tokens_for(params, False) == 0
    scenario = resolved_pool_params(RunSpec(), {"prefill_batch_tokens": 1024})
    assert prefill_batch_tokens_for(scenario, on_gpu=True) == 1024
    flag = resolved_pool_params(RunSpec(prefill_batch_tokens=0), {"prefill_batch_tokens": 1024})
    assert prefill_batch_tokens_for(flag, on_gpu=True) == 0
    with pytest.raises(ValueError, match="prefill_batch_tokens must be an int >= 0"):
        RunSpec(prefill_batch_tokens=-1)
    with pytest.raises(ValueError, match="prefill_batch_tokens must be an int >= 0"):
        resolved_pool_params(RunSpec(), {"prefill_batch_tokens": "many"})
