"""Paged prefill in the live path: chunks read their history in place (app/workloads/prefill_attention.py) and
the run matches the gather route within the float32 tolerance with identical greedy tokens, on the tiny models and
SmolLM2; the dense baseline is the anchor (test_parity pins it to mlx-lm's own generation). The bytes a prefill
gathers are measured from MLX's allocator: doubling the prompt at a fixed chunk size at most doubles them on the
paged route (the gather route's grow with the square)."""

from __future__ import annotations

import mlx.core as mx
import pytest

from pool.prefill_decision import ENV_VAR

from .helpers import burst_toml, run_backend, write_scenario

# largest |logit difference| paged route vs gather route, float32 on CPU: measured 2.4e-6 (tiny-llama), the
# difference of summing one softmax over pieces instead of over the whole history
LOGIT_TOLERANCE = 1e-4
SMALL_POOL = dict(block_size=8, slab_blocks=4, prefill_chunk=32)  # 32-token slabs: a chunk reads many pieces


def _run(loaded, scenario, backend, route: str, monkeypatch, **fields):
    monkeypatch.setenv(ENV_VAR, "1" if route == "paged" else "0")
    return run_backend(loaded, scenario, backend, **fields)


def _tokens(logits: list) -> list:
    return [(ids, mx.argmax(lg, axis=-1).tolist()) for ids, lg in logits]


def _route_vs_gather(loaded, scenario, monkeypatch, **fields):
    paged, _, paged_logits = _run(loaded, scenario, "slab", "paged", monkeypatch, **fields)
    gathered, _, gather_logits = _run(loaded, scenario, "slab", "gather", monkeypatch, **fields)
    _, _, dense_logits = _run(loaded, scenario, "dense", "gather", monkeypatch, **fields)
    counters = paged["pool"]["counters"]
    assert counters["prefill_paged_decisions"] > 0 and counters["prefill_gather_decisions"] == 0
    assert counters["prefill_bytes_gathered_model"] == 0  # nothing gathered for prefill on the paged route
    assert gathered["pool"]["counters"]["prefill_paged_decisions"] == 0
    assert len(paged_logits) == len(gather_logits) > 0
    worst = max(mx.abs(a - b).max().item() for (_, a), (_, b) in zip(paged_logits, gather_logits))
    assert worst <= LOGIT_TOLERANCE, f"paged vs gather route: max |logit diff| {worst}"
    assert _tokens(paged_logits) == _tokens(gather_logits) == _tokens(dense_logits)
    return paged


pytestmark = pytest.mark.numerics


@pytest.mark.parametrize("model", ["tiny_llama", "tiny_qwen3"])
def test_paged_route_matches_gather_route_on_tiny_models(model, request, tmp_path, monkeypatch):
    scenario = write_scenario(tmp_path, burst_toml(n=3, concurrency=2, prompt_tokens="[150, 300]", gen_tokens="6"))
    summary = _route_vs_gather(request.getfixturevalue(model), scenario, monkeypatch, **SMALL_POOL)
    reasons = summary["prefill_attention"]["reasons"]
    assert "history read in place" in reasons, reasons
    assert "first chunk: own K/V only" in reasons


def test_paged_route_matches_gather_route_on_smollm2(smollm2, tmp_path, monkeypatch):
    scenario = write_scenario(tmp_path, burst_toml(n=2, concurrency=2, prompt_tokens="[200, 400]", gen_tokens="5"))
    _route_vs_gather(smollm2, scenario, monkeypatch, block_size=16, slab_blocks=4, prefill_chunk=64)


def _prefill_bytes(loaded, tmp_path, prompt: int, route: str, monkeypatch) -> int:
    scenario = write_scenario(tmp_path, burst_toml(n=1, concurrency=1, prompt_tokens=str(prompt), gen_tokens="1"),
                              name=f"p{prompt}")
    summary, _, _ = _run(loaded, scenario, "slab", route, monkeypatch, measure_gathers=True, **SMALL_POOL)
    measured = summary["pool"]["counters"]["prefill_bytes_gathered"]
    assert measured is not None, "gathers were not metered"
    return measured


def test_doubling_the_prompt_at_most_doubles_prefill_bytes_gathered(tiny_llama, tmp_path, monkeypatch):
    paged = [_prefill_bytes(tiny_llama, tmp_path, prompt, "paged", monkeypatch) for prompt in (256, 512)]
    assert paged[1] <= 2 * paged[0], f"paged route: {paged} bytes gathered for 256 / 512 prompt tokens"
    # the meter sees the gather route's copies: they grow with the square of the prompt
    gathered = [_prefill_bytes(tiny_llama, tmp_path, prompt, "gather", monkeypatch) for prompt in (256, 512)]
    assert gathered[0] > 0 and gathered[1] > 3 * gathered[0], f"gather route: {gathered}"
