"""The embedded SmolLM2-135M-Instruct GGUF on mlx-lm's llama: mapping, numerics, and the Paris answer."""

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from app.models import greedy_generate, load_model
from app.models.gguf_smollm2 import (build_model, locate_gguf, mlx_lm_name, model_args_from_metadata,
                                     quantization_layout, read_gguf)

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def test_geometry_from_metadata(smollm2):
    assert (smollm2.name, smollm2.family, smollm2.dtype, smollm2.device) == ("smollm2-135m", "llama", "float32", "cpu")
    assert (smollm2.num_layers, smollm2.n_kv_heads, smollm2.head_dim, smollm2.vocab_size) == (30, 3, 64, 49152)
    args = smollm2.model.args
    assert args.rope_traditional and args.tie_word_embeddings and args.rope_theta == 100000.0
    assert (args.hidden_size, args.num_attention_heads, args.intermediate_size) == (576, 9, 1536)


def test_weights_are_dense_fp32_on_cpu_and_counted(smollm2):
    params = tree_flatten(smollm2.model.parameters())
    assert all(v.dtype == mx.float32 for _, v in params)
    num_params = sum(v.size for _, v in params)
    assert 134_000_000 < num_params < 136_000_000
    assert smollm2.weight_bytes == 4 * num_params
    assert smollm2.info["kind"] == "gguf" and smollm2.info["source"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert smollm2.info["blas"].startswith("BLAS: ")


def test_every_gguf_tensor_has_a_home():
    tensors, meta = read_gguf(locate_gguf())
    assert len(tensors) == 694
    names = {mlx_lm_name(k) for k in tensors}
    assert "model.layers.29.self_attn.q_proj.scales" in names and "model.embed_tokens.biases" in names
    with pytest.raises(ValueError, match="unexpected GGUF tensor"):
        mlx_lm_name("blk.0.attn_qkv.weight")
    # token embedding 8-bit, linear layers 4-bit, group 32 (the layout mx.load gives Q4_1 files)
    assert quantization_layout(tensors["token_embd.weight"], tensors["token_embd.scales"], 576) == (8, 32)
    assert quantization_layout(tensors["blk.0.ffn_down.weight"], tensors["blk.0.ffn_down.scales"], 1536) == (4, 32)
    assert model_args_from_metadata(meta, tensors).num_key_value_heads == 3


def test_kept_quantized_matches_dequantized_logits(smollm2):
    """The GPU path (QuantizedLinear/QuantizedEmbedding) computes the same function as the CPU fp32 path."""
    tensors, meta = read_gguf(locate_gguf())
    quantized, quant = build_model(tensors, meta, dtype=mx.float32, keep_quantized=True)
    assert quant["kept_quantized"] and "embed_tokens:8bit/g32" in quant["layouts"]
    prompt = mx.array([smollm2.tokenizer.encode("The quick brown fox jumps over the lazy dog")])
    dense_logits = smollm2.model(prompt)
    quant_logits = quantized(prompt)
    assert mx.argmax(dense_logits, -1).tolist() == mx.argmax(quant_logits, -1).tolist()
    # same weights, reordered arithmetic (quantized matmul kernel vs BLAS): measured max 1.4e-4 on logits ~30
    assert mx.abs(dense_logits - quant_logits).max().item() < 1e-3


def test_logits_are_sensible(smollm2):
    ids = smollm2.tokenizer.encode("The capital of France is")
    logits = smollm2.model(mx.array([ids]))[0, -1]
    top = mx.argsort(-logits)[:5].tolist()
    assert smollm2.tokenizer.encode(" Paris")[0] in top
    assert mx.isfinite(logits).all().item()


def test_greedy_answer_contains_paris(smollm2):
    ids = smollm2.tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True)
    result = greedy_generate(smollm2, ids, max_tokens=24)
    answer = smollm2.tokenizer.decode(result.tokens)
    assert "Paris" in answer, answer
    assert result.finish_reason == "eos" and result.tokens[-1] == 2


def test_half_precision_load_on_cpu_is_honoured():
    loaded = load_model("SmolLM2-135M-Instruct", dtype="bfloat16", device="cpu")
    assert loaded.dtype == "bfloat16" and loaded.name == "smollm2-135m"
    assert {v.dtype for _, v in tree_flatten(loaded.model.parameters())} == {mx.bfloat16}
    assert loaded.weight_bytes * 2 == sum(v.size for _, v in tree_flatten(loaded.model.parameters())) * 4
