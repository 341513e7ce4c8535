"""Synthetic models: any mlx-lm architecture built from a config dict, with seeded random weights.

Used for tests (tiny models) and for sizing workloads on real geometries without downloading weights
(``qwen3-0.6b``). Weights are a pure function of (config, seed): each parameter gets its own key split from
``mx.random.key(seed)`` in sorted-name order, so the global RNG state and module construction order do not matter.

Scale: every weight matrix ~ N(0, 1/fan_in) (LeCun), so each projection maps unit-RMS inputs to unit-RMS
outputs and the pre-norm residual stream grows only ~sqrt(depth); the token embedding (and an untied LM head) use
std ``hidden_size**-0.5`` so that logits of a unit-RMS hidden state have std ~1: peaked enough for greedy decoding
to pick clear winners, far from overflow in bf16. (A flat 0.02 std makes a tied-embedding model echo its input
token forever: the embedding then dominates the residual stream.) Norm weights are ones, biases zeros.
"""

from __future__ import annotations

from typing import Any

# Named configs for ``synthetic:<name>``. Values are mlx-lm ModelArgs fields (model_type selects the module).
SYNTHETIC_CONFIGS: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": {
        "model_type": "qwen3", "hidden_size": 1024, "num_hidden_layers": 28, "intermediate_size": 3072,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
        "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
    },
    "tiny-llama": {
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512,
        "rope_theta": 10_000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "max_position_embeddings": 4096,
    },
    "tiny-qwen3": {
        "model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 3, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512,
        "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "max_position_embeddings": 4096,
    },
    # qwen3-0.6b's depth and context (28 layers, 40960 positions) at tiny widths: a run's pool growth, device
    # syncs and per-layer graph (ops per step) are qwen3-0.6b's; its compute is a CPU's
    "tiny-qwen3-28l": {
        "model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 28, "intermediate_size": 128,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 512,
        "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
    },
    # another geometry for the H200 benches: a llama of ~0.8B parameters, head_dim 64, GQA 32:8 (TinyLlama's widths
    # at 16 layers)
    "llama-0.8b": {
        "model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 16, "intermediate_size": 5632,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 32000,
        "rope_theta": 10_000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "max_position_embeddings": 8192,
    },
}


def _init_std(name: str, shape: tuple[int, ...], hidden_size: int) -> float | None:
    """Std of the normal init for one parameter; None means 'ones' (norms) and 0.0 means zeros (biases)."""
    if name.endswith(".bias"):
        return 0.0
    if len(shape) == 1:
        return None  # RMSNorm / LayerNorm weight
    if "embed_tokens" in name or name.startswith("lm_head"):
        return hidden_size**-0.5
    return shape[-1] ** -0.5  # fan_in of an mlx [out, in] weight


def seeded_parameters(model, seed: int, dtype, hidden_size: int) -> list[tuple[str, Any]]:
    """Deterministic (name, array) pairs for every parameter of ``model`` (drawn in float32, cast to ``dtype``)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    params = sorted(tree_flatten(model.parameters()), key=lambda item: item[0])
    keys = mx.random.split(mx.random.key(seed), max(len(params), 2))
    out = []
    for index, (name, value) in enumerate(params):
        std = _init_std(name, value.shape, hidden_size)
        if std is None:
            new = mx.ones(value.shape, dtype=dtype)
        elif std == 0.0:
            new = mx.zeros(value.shape, dtype=dtype)
        else:
            new = (mx.random.normal(value.shape, key=keys[index]) * std).astype(dtype)
        out.append((name, new))
    return out


def build_synthetic(config: dict[str, Any], *, seed: int = 0, dtype=None):
    """An mlx-lm model of ``config["model_type"]`` with seeded weights, evaluated (one parameter at a time)."""
    import mlx.core as mx
    from mlx_lm.utils import _get_classes

    dtype = dtype or mx.float32
    model_class, args_class = _get_classes(config)
    args = args_class.from_dict(config)
    model = model_class(args)
    weights = seeded_parameters(model, seed, dtype, int(config["hidden_size"]))
    for name, value in weights:
        mx.eval(value)  # evaluate one by one: keeps the transient float32 draw to one parameter (0.6B models)
    model.load_weights(weights, strict=True)
    model.eval()
    return model


class ByteTokenizer:
    """Tokenizer for synthetic models: UTF-8 bytes map to ids 3..258; 0 = ``<eos>``, 1 = ``<bos>``, 2 = ``<pad>``.

    Prompts for synthetic models are usually token ids; this lets real text (the bundled corpus) flow through the
    same API as the GGUF tokenizer (``encode``/``decode``/``eos_token_ids``/``detokenizer``). Ids at or above 259
    (random models emit them) decode to ``<id>``. There is no chat template.
    """

    SPECIALS = ("<eos>", "<bos>", "<pad>")
    BYTE_OFFSET = len(SPECIALS)

    def __init__(self, vocab_size: int):
        if vocab_size < self.BYTE_OFFSET + 256:
            raise ValueError(f"ByteTokenizer needs vocab_size >= {self.BYTE_OFFSET + 256}, got {vocab_size}")
        self.vocab_size = vocab_size
        self.eos_token_id, self.bos_token_id, self.pad_token_id = 0, 1, 2
        self.eos_token_ids = {self.eos_token_id}
        self.has_chat_template = False

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = [self.BYTE_OFFSET + b for b in text.encode("utf-8")]
        return [self.bos_token_id, *ids] if add_special_tokens else ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        parts: list[str] = []
        pending = bytearray()
        for token in (int(i) for i in ids):
            if self.BYTE_OFFSET <= token < self.BYTE_OFFSET + 256:
                pending.append(token - self.BYTE_OFFSET)
                continue
            parts.append(pending.decode("utf-8", errors="replace"))
            pending.clear()
            if token < self.BYTE_OFFSET:
                parts.append("" if skip_special_tokens else self.SPECIALS[token])
            else:
                parts.append(f"<{token}>")
        parts.append(pending.decode("utf-8", errors="replace"))
        return "".join(parts)

    def apply_chat_template(self, *args, **kwargs):
        raise ValueError("synthetic models have no chat template: pass token ids or plain text to encode()")

    @property
    def detokenizer(self):
        """A fresh mlx-lm streaming detokenizer over this tokenizer."""
        from mlx_lm.tokenizer_utils import NaiveStreamingDetokenizer

        return NaiveStreamingDetokenizer(self)
