"""Byte-identical parity: slab pool, monolithic pool and mlx-lm's dense caches under the same schedule, anchored
to mlx-lm's own generation.

Several concurrent prompts of different lengths (so decode batches mix lengths, sequences join and leave),
tiny block/slab sizes so every prompt crosses several slab boundaries, greedy decoding: the logits of every
decode step must be equal bytes (mx.array_equal) and the tokens identical on all three backends. The dense
baseline is pinned to mlx-lm's own ``KVCache`` (its prefill's only adds layer starts) and ``BatchKVCache`` (recorded),
and every backend is checked against mlx-lm's ``generate_step`` (one prompt) and ``BatchGenerator`` (several).

Byte-identity is asserted only where it holds by construction: the same ops on the same shapes (the same prefill
chunks, the same decode batch, the same left-padded width and mask), so it holds on every BLAS kernel (OpenBLAS's
Prescott, Haswell, SkylakeX and Cooperlake kernels pick other summation orders for other shapes, e.g. for a batch
of 1 against a batch of 3, or 10 keys against 30). mlx-lm's own padded batch prefill is other arithmetic: it is
held to identical tokens and the float32 reorder tolerance (``helpers.reorder_tolerance``).
"""

import pytest
from mlx_lm.models.cache import BatchKVCache

from app.workloads.layer_starts import PrefillKVCache
from app.workloads.paged_cache import PagedLayerCache

from .helpers import (BACKENDS, assert_same_logits, assert_within_reorder_tolerance, run_backend, spied,
                      write_scenario)

pytestmark = pytest.mark.numerics

# what each backend must hand the model: mlx-lm's own caches for the dense baseline (its prefill's KVCache with the
# layer starts every backend has: app/workloads/layer_starts.py), the pool's adapter otherwise
CACHE_TYPES = {"dense": {PrefillKVCache, BatchKVCache}, "slab": {PagedLayerCache}, "monolithic": {PagedLayerCache}}

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
    results = {}
    for backend in BACKENDS:
        seen = set()
        results[backend] = run_backend(spied(loaded, seen), scenario, backend, **fields)
        assert seen == CACHE_TYPES[backend], f"{backend} handed the model {seen}"
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


PREFILL_CHUNK = 16  # the engine's prefill chunks and BatchGenerator's prefill steps: the same arithmetic
BATCH_TEXTS = ("The harbour town woke before the sun did.",
               "Gulls waited on the pier, patient and loud, while the boats came in one by one with the night's catch.",
               "Why?")


def _mlx_lm_batch(loaded, prompts, max_tokens, *, prefilled: bool):
    """mlx-lm's own continuous batching (BatchGenerator, greedy, no stop tokens): per prompt, its tokens and each
    step's logprobs. ``prefilled``: each prompt but its last token is first run alone through a fresh mlx-lm
    prompt cache in PREFILL_CHUNK-token chunks (the engine's prefill arithmetic) and handed to the generator, which
    merges the caches into one left-padded ``BatchKVCache`` and decodes the prompts as one batch from the first
    token (the engine's decode arithmetic). Otherwise its defaults: one right-padded batch prefill of 2048-token
    steps, then decode."""
    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.models.cache import make_prompt_cache

    generator = BatchGenerator(loaded.model, max_tokens=max_tokens)
    if prefilled:
        caches = [make_prompt_cache(loaded.model) for _ in prompts]
        for prompt, cache in zip(prompts, caches):
            for start in range(0, len(prompt) - 1, PREFILL_CHUNK):
                loaded.model(mx.array(prompt[start:min(start + PREFILL_CHUNK, len(prompt) - 1)])[None], cache=cache)
                mx.eval([c.state for c in cache])
        uids = generator.insert([p[-1:] for p in prompts], [max_tokens] * len(prompts), caches=caches,
                                all_tokens=[p[:-1] for p in prompts])
    else:
        uids = generator.insert(prompts, [max_tokens] * len(prompts))
    out = {uid: [] for uid in uids}
    while responses := generator.next_generated():
        for r in responses:
            out[r.uid].append((r.token, r.logprobs))
    generator.close()
    return [out[uid] for uid in uids]


def _engine_batch(loaded, prompts, backend, max_tokens, scenario):
    """The same prompts through a workload session (Scheduler + Engine on ``backend``, as ``slabscope run`` builds
    it), all admitted at once: per prompt, its tokens and each step's logprobs."""
    import mlx.core as mx

    from app.workloads.scenarios import load_scenario
    from app.workloads.scheduler import Request
    from app.workloads.session import build_session
    from app.workloads.spec import RunSpec

    logprobs, batches = {}, []

    def hook(seq_ids, logits):  # normalised as mlx-lm's GenerationBatch does: over the batch's [B, vocab] logits
        batches.append(len(seq_ids))
        normalised = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        for row, seq_id in enumerate(seq_ids):
            logprobs.setdefault(seq_id, []).append(normalised[row])

    spec = RunSpec(scenario=scenario, backend=backend, model=loaded.name, block_size=4, slab_blocks=2,
                   prefill_chunk=PREFILL_CHUNK, prefix_cache=False)
    session = build_session(spec, load_scenario(spec.scenario, spec.overrides), loaded=loaded, logits_hook=hook)
    try:
        session.scheduler.set_concurrency(len(prompts))
        session.scheduler.submit([Request(i, p, max_tokens) for i, p in enumerate(prompts)])
        while session.engine.step() is not None:
            pass
        finished = {s.request.req_id: s for s in session.scheduler.finished}
    finally:
        session.close()
    assert max(batches) == len(prompts), "the prompts never decoded in one batch"
    return [list(zip(finished[i].generated, logprobs[finished[i].seq_id])) for i in range(len(prompts))]


@pytest.mark.parametrize("model", ["tiny_llama", "tiny_qwen3", pytest.param("smollm2", marks=pytest.mark.slow)])
def test_batched_generation_matches_mlx_lm_batch_generator(model, request, tmp_path):
    """Three prompts of different lengths decoded as one batch, on every backend, against mlx-lm's BatchGenerator.
    Given the prompts' caches prefilled in the engine's chunk size, it decodes the same batch of the same width
    with the same masks: every step's logprobs are equal bytes, on any BLAS kernel. With its defaults (a padded
    batch prefill: other shapes, so other summation orders) the tokens are identical and the logprobs within the
    float32 reorder tolerance."""
    import mlx.core as mx

    loaded = request.getfixturevalue(model)
    prompts = [list(loaded.tokenizer.encode(text)) for text in BATCH_TEXTS]
    same_arithmetic = _mlx_lm_batch(loaded, prompts, 10, prefilled=True)
    padded = _mlx_lm_batch(loaded, prompts, 10, prefilled=False)
    scenario = write_scenario(tmp_path, MIXED)  # the session's scenario; its requests are not used
    for backend in BACKENDS:
        got = _engine_batch(loaded, prompts, backend, 10, scenario)
        for i, (ours, theirs, theirs_padded) in enumerate(zip(got, same_arithmetic, padded)):
            assert [t for t, _ in ours] == [t for t, _ in theirs] == [t for t, _ in theirs_padded], (backend, i)
            for step, ((_, lp), (_, ref), (_, ref_padded)) in enumerate(zip(ours, theirs, theirs_padded)):
                assert mx.array_equal(lp, ref), f"{backend}: prompt {i} logprobs differ from mlx-lm at step {step}"
                assert_within_reorder_tolerance(lp, ref_padded, f"{backend}: prompt {i} step {step} vs padded")
