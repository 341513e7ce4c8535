"""Byte-identical parity: slab pool, monolithic pool and mlx-lm's dense caches under the same schedule.

Several concurrent prompts of different lengths (so decode batches mix lengths, sequences join and leave),
tiny block/slab sizes so every prompt crosses several slab boundaries, greedy decoding: the logits of every
decode step must be equal bytes (mx.array_equal) and the tokens identical on all three backends.
"""

import pytest

from .helpers import BACKENDS, assert_same_logits, run_backend, write_scenario

MIXED = """
[params]
n = 5
[[phases]]
name = "mixed"
kind = "requests"
count = "$n"
concurrency = 3
prompt_tokens = [3, 90]
gen_tokens = [2, 14]
"""


def _three_way(loaded, scenario, **fields):
    results = {b: run_backend(loaded, scenario, b, **fields) for b in BACKENDS}
    dense_summary, _, dense_logits = results["dense"]
    assert dense_logits, "no decode step ran"
    for backend in ("slab", "monolithic"):
        summary, _, logits = results[backend]
        assert_same_logits(logits, dense_logits, f"{backend} vs dense")
        assert summary["decode_tokens"] == dense_summary["decode_tokens"]
    return results


@pytest.mark.parametrize("model", ["tiny_llama", "tiny_qwen3"])
def test_three_backends_byte_identical_on_tiny_models(model, request, tmp_path):
    loaded = request.getfixturevalue(model)
    scenario = write_scenario(tmp_path, MIXED)
    # 4-token blocks, 2-block slabs: a 90-token prompt spans 12 slabs; 16-token chunks split prefill
    results = _three_way(loaded, scenario, block_size=4, slab_blocks=2, prefill_chunk=16)
    slab = results["slab"][0]["pool"]["counters"]
    assert slab["slab_appends"] > 10 * loaded.num_layers  # many slab boundaries crossed
    mono = results["monolithic"][0]["pool"]["counters"]
    assert mono["grow_events"] >= 1 and mono["bytes_copied"] > 0


def test_batch_membership_changes_keep_parity(tiny_llama, tmp_path):
    """Closed-loop arrivals: requests join a running decode batch and leave it at different times."""
    scenario = write_scenario(tmp_path, MIXED.replace("n = 5", "n = 9").replace("[2, 14]", "[1, 20]"))
    results = _three_way(tiny_llama, scenario, block_size=8, slab_blocks=1, prefill_chunk=32)
    batches = [len(ids) for ids, _ in results["dense"][2]]
    assert max(batches) == 3 and min(batches) == 1 and len(set(batches)) == 3


@pytest.mark.slow
def test_three_backends_byte_identical_on_smollm2(smollm2, tmp_path):
    scenario = write_scenario(tmp_path, MIXED.replace("n = 5", "n = 3").replace("[3, 90]", "[20, 120]")
                              .replace("[2, 14]", "[3, 8]"))
    _three_way(smollm2, scenario, block_size=16, slab_blocks=2, prefill_chunk=64)


def _stock_greedy(loaded, ids, max_tokens, step_size):
    """Tokens and per-step logits from mlx-lm's own generate_step (KVCache, greedy)."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    tokens, logprobs = [], []
    for token, lp in generate_step(mx.array(ids), loaded.model, max_tokens=max_tokens,
                                   prefill_step_size=step_size):
        tokens.append(int(token))
        logprobs.append(lp)
    return tokens, logprobs


@pytest.mark.parametrize("model", ["tiny_llama", "tiny_qwen3", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_single_prompt_matches_stock_mlx_lm_generation(model, request):
    """One prompt through the engine on every backend = mlx-lm's generate_step, token for token and in logprobs."""
    import mlx.core as mx

    from app.commands.generate import generate

    loaded = request.getfixturevalue(model)
    ids = list(loaded.tokenizer.encode("The harbour town woke before the sun did, and the gulls waited."))
    stock_tokens, stock_lp = _stock_greedy(loaded, ids, 12, 256)
    for backend in BACKENDS:
        got = generate_logprobs(loaded, ids, backend, 12)
        assert [t for t, _ in got] == stock_tokens, backend
        for step, ((_, lp), ref) in enumerate(zip(got, stock_lp)):
            assert mx.array_equal(lp, ref), f"{backend}: logprobs differ from stock at step {step}"
    assert generate(loaded, ids, backend="slab", max_tokens=12) == _strip_eos(stock_tokens, loaded)


def _strip_eos(tokens, loaded):
    out = []
    for t in tokens:
        out.append(t)
        if t in loaded.eos_token_ids:
            return out[:-1]
    return out


def generate_logprobs(loaded, ids, backend, max_tokens):
    """(token, logprobs[vocab]) per decode step of one request run through Scheduler + Engine."""
    import mlx.core as mx

    from app.workloads.engine import Engine
    from app.workloads.scheduler import Request, Scheduler
    from app.workloads.session import make_backend
    from app.workloads.spec import RunSpec

    kv = make_backend(RunSpec(backend=backend, prefix_cache=False), loaded, {"block_size": 8, "slab_blocks": 2})
    captured = []
    scheduler = Scheduler(prefill_chunk=256, admit_fn=kv.admit, release_fn=kv.release)
    engine = Engine(loaded.model, kv, scheduler, logits_hook=lambda seq_ids, lg: captured.append(lg))
    scheduler.submit([Request(0, ids, max_tokens)])
    while engine.step() is not None:
        pass
    tokens = scheduler.finished[0].generated
    logprobs = [(lg - mx.logsumexp(lg, keepdims=True))[0] for lg in captured]
    return list(zip(tokens, logprobs))
