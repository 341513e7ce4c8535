"""Synthetic models: seeded, deterministic, right geometry; ByteTokenizer; greedy_generate == stock generate_step."""

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import KVCache
from mlx_lm.utils import _get_classes

from app.models import SYNTHETIC_CONFIGS, ByteTokenizer, greedy_generate, load_model, logits_from_hidden
from app.models.registry import _geometry

PROMPT = [5, 17, 300, 42, 42, 7, 511, 3, 9, 128, 64, 2, 77]


@pytest.mark.parametrize("name,family,layers", [("synthetic:tiny-llama", "llama", 2),
                                                ("synthetic:tiny-qwen3", "qwen3", 3)])
def test_tiny_geometry_and_shapes(name, family, layers):
    loaded = load_model(name)
    assert (loaded.family, loaded.num_layers, loaded.n_kv_heads, loaded.head_dim, loaded.vocab_size) == \
        (family, layers, 2, 16, 512)
    assert loaded.dtype == "float32" and loaded.info["kind"] == "synthetic"
    assert loaded.weight_bytes == 4 * sum(v.size for _, v in tree_flatten(loaded.model.parameters()))
    logits = loaded.model(mx.array([PROMPT, PROMPT[::-1]]))
    assert logits.shape == (2, len(PROMPT), 512) and logits.dtype == mx.float32
    std = mx.std(logits).item()
    assert 0.3 < std < 3.0, f"logit scale {std} is not sane"


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["synthetic:tiny-llama", "synthetic:tiny-qwen3"])
def test_same_seed_gives_identical_weights_and_logits(name):
    mx.random.seed(1)
    first = load_model(name, seed=7)
    mx.random.seed(12345)  # the global RNG must not matter
    second = load_model(name, seed=7)
    other = load_model(name, seed=8)
    inputs = mx.array([PROMPT])
    assert mx.array_equal(first.model(inputs), second.model(inputs))
    assert not mx.array_equal(first.model(inputs), other.model(inputs))
    for (n1, w1), (n2, w2) in zip(tree_flatten(first.model.parameters()), tree_flatten(second.model.parameters())):
        assert n1 == n2 and mx.array_equal(w1, w2)


def test_bf16_weights_are_the_rounded_fp32_weights():
    fp32 = load_model("synthetic:tiny-qwen3", dtype="float32")
    bf16 = load_model("synthetic:tiny-qwen3", dtype="bfloat16")
    w32 = dict(tree_flatten(fp32.model.parameters()))
    for name, w in tree_flatten(bf16.model.parameters()):
        assert w.dtype == mx.bfloat16 and mx.array_equal(w, w32[name].astype(mx.bfloat16))
    assert bf16.weight_bytes * 2 == fp32.weight_bytes


def test_qwen3_0_6b_geometry_without_materialising_weights():
    config = SYNTHETIC_CONFIGS["qwen3-0.6b"]
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))  # parameters stay lazy: nothing is drawn
    assert _geometry(model) == {"num_layers": 28, "n_kv_heads": 8, "head_dim": 128, "vocab_size": 151936}
    assert model.args.tie_word_embeddings and model.args.rope_theta == 1_000_000.0
    num_params = sum(v.size for _, v in tree_flatten(model.parameters()))
    assert 595_000_000 < num_params < 597_000_000  # Qwen3-0.6B with tied embeddings: ~596M


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["synthetic:tiny-llama", "synthetic:tiny-qwen3"])
def test_greedy_generate_is_stock_generate_step(name):
    """Same tokens, and log-probs derived from our raw logits equal generate_step's bit for bit."""
    loaded = load_model(name)
    prompt = PROMPT * 3  # 39 tokens: several prefill chunks of 8
    ours = greedy_generate(loaded, prompt, max_tokens=12, prefill_step=8, stop_at_eos=False)
    stock = list(generate_step(mx.array(prompt), loaded.model, max_tokens=12, prefill_step_size=8))
    assert ours.tokens == [int(token) for token, _ in stock]
    for logits, (_, logprobs) in zip(ours.logits, stock):
        assert mx.array_equal(logits - mx.logsumexp(logits, keepdims=True), logprobs)
    assert all(isinstance(c, KVCache) and c.offset == len(prompt) + 11 for c in ours.cache)
    assert ours.finish_reason == "length" and len(set(ours.tokens)) > 1


def test_greedy_generate_stops_at_eos_and_validates():
    loaded = load_model("synthetic:tiny-llama")
    first = greedy_generate(loaded, PROMPT, max_tokens=1).tokens[0]
    loaded.tokenizer.eos_token_ids = {first}  # make the first greedy token the EOS
    result = greedy_generate(loaded, PROMPT, max_tokens=10)
    assert result.tokens == [first] and result.finish_reason == "eos"
    with pytest.raises(ValueError, match="at least one prompt token"):
        greedy_generate(loaded, [], max_tokens=3)
    with pytest.raises(ValueError, match="max_tokens"):
        greedy_generate(loaded, PROMPT, max_tokens=0)


@pytest.mark.numerics
@pytest.mark.parametrize("name", ["synthetic:tiny-llama", "synthetic:tiny-qwen3"])
def test_logits_from_hidden_is_the_model_head(name):
    loaded = load_model(name)
    inputs = mx.array([PROMPT])
    hidden = loaded.model.model(inputs)
    # Same rows in, same bits out. (Projecting only hidden[:, -1:] need NOT be bit-identical to slicing the full
    # projection: OpenBLAS picks different small-matrix kernels by row count; see the report.)
    assert mx.array_equal(logits_from_hidden(loaded.model, hidden), loaded.model(inputs))


def test_byte_tokenizer_round_trip_and_specials():
    tok = ByteTokenizer(512)
    text = "Grüße, 世界! 🚀"
    ids = tok.encode(text)
    assert all(3 <= i < 259 for i in ids) and tok.decode(ids) == text
    assert tok.encode("a", add_special_tokens=True) == [1, 3 + ord("a")]
    assert tok.decode([1, 3 + ord("h"), 3 + ord("i"), 400, 0]) == "<bos>hi<400><eos>"
    assert tok.decode([1, 3 + ord("h"), 0], skip_special_tokens=True) == "h"
    assert tok.eos_token_ids == {0} and not tok.has_chat_template
    with pytest.raises(ValueError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="vocab_size >= 259"):
        ByteTokenizer(100)


def test_byte_tokenizer_streams_through_mlx_lm_detokenizer():
    tok = ByteTokenizer(512)
    detok = tok.detokenizer
    detok.reset()
    for token in tok.encode("naïve 🚀 ok"):
        detok.add_token(token)
    detok.finalize()
    assert detok.text == "naïve 🚀 ok"
