"""Paged prefill in the live path: chunks read their history in place (app/workloads/prefill_attention.py) and
the run matches the gather route within the float32 tolerance with identical greedy tokens, on the tiny models and
SmolLM2; the dense baseline is the anchor (test_parity pins it to mlx-lm's own generation). The bytes a prefill
gathers are measured from MLX's allocator: the paged route reads head-major slab rows in place and gathers none, so
doubling the prompt at a fixed chunk size at most doubles them (the gather route's grow with the square)."""

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
    # the route reads views of the slabs (head-major rows are packed): nothing to copy; the gather joins and trims
    assert counters["prefill_bytes_gathered_model"] == 0 < gathered["pool"]["counters"]["prefill_bytes_gathered_model"]
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
    # prompts over 2-4 slabs of 64 tokens in 32-token chunks: later chunks read history pieces from several slabs
    # (half the compute of 200-400-token prompts: on reference BLAS 123 s instead of 225, a fifth of CI's time)
    scenario = write_scenario(tmp_path, burst_toml(n=2, concurrency=2, prompt_tokens="[100, 200]", gen_tokens="5"))
    _route_vs_gather(smollm2, scenario, monkeypatch, block_size=16, slab_blocks=4, prefill_chunk=32)


def _prefill_bytes(loaded, tmp_path, prompt: int, route: str, monkeypatch) -> int:
    """Prefill bytes gathered (measured) of one ``prompt``-token request on ``route``."""
    scenario = write_scenario(tmp_path, burst_toml(n=1, concurrency=1, prompt_tokens=str(prompt), gen_tokens="1"),
                              name=f"p{prompt}")
    summary, _, _ = _run(loaded, scenario, "slab", route, monkeypatch, measure_gathers=True, **SMALL_POOL)
    measured = summary["pool"]["counters"]["prefill_bytes_gathered"]
    assert measured is not None, "gathers were not metered"
    return measured


@pytest.fixture(scope="module")
def bytes_by_prompt(tiny_llama, tmp_path_factory):
    """{route: [prefill bytes gathered, measured, at 256 and 512 prompt tokens]} (chunk 32)."""
    out = tmp_path_factory.mktemp("bytes")
    with pytest.MonkeyPatch.context() as patch:
        return {route: [_prefill_bytes(tiny_llama, out, prompt, route, patch) for prompt in (256, 512)]
                for route in ("paged", "gather")}


def test_paged_route_gathers_nothing_the_gather_route_grows_with_the_square(bytes_by_prompt):
    paged, gathered = bytes_by_prompt["paged"], bytes_by_prompt["gather"]
    assert paged == [0, 0] and all(g > 0 for g in gathered), bytes_by_prompt
    # the meter sees the gather route's copies grow with the square of the prompt
    assert gathered[1] > 3 * gathered[0], bytes_by_prompt


def test_doubling_the_prompt_at_most_doubles_prefill_bytes_gathered(bytes_by_prompt):
    paged = bytes_by_prompt["paged"]
    assert paged[1] <= 2 * paged[0], f"paged route: {paged} bytes gathered for 256 / 512 prompt tokens"
