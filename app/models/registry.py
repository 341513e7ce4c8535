"""``load_model``: one entry point for the embedded GGUF model, synthetic models and local mlx-lm directories.

This module imports no mlx at import time (the TUI lists models through it). ``load_model`` validates the name,
dtype and device *before* touching anything, so a bad request raises and leaves the process as it was.
"""

from __future__ import annotations

import glob
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from .blas import describe_device_blas, enable_openblas
from .synthetic import SYNTHETIC_CONFIGS

DEFAULT_MODEL = "smollm2-135m"
_DEFAULT_ALIASES = {"smollm2-135m", "default", "smollm2-135m-instruct"}
SYNTHETIC_PREFIX = "synthetic:"
_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}
_DEVICES = ("cpu", "gpu")
DTYPE_NAMES = tuple(_DTYPES)  # what --dtype accepts


@dataclass
class LoadedModel:
    """A model ready for forward passes, plus the facts the workloads and probes need about it."""

    model: Any                 # mlx-lm nn.Module: model(inputs[B, L], cache=[per-layer caches]) -> logits
    tokenizer: Any             # encode/decode/eos_token_ids/detokenizer (TokenizerWrapper or ByteTokenizer)
    name: str                  # canonical name: "smollm2-135m", "synthetic:tiny-llama", or the directory
    family: str                # mlx-lm model_type ("llama", "qwen3", ...)
    dtype: str                 # activation / KV dtype: "float32", "bfloat16" or "float16"
    device: str                # "cpu" or "gpu" (the MLX default device the model was loaded for)
    num_layers: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    weight_bytes: int          # bytes of all loaded parameters as stored (quantized tensors count packed)
    info: dict[str, Any] = field(default_factory=dict)  # kind, source, quantization, blas, load_s, ...
    max_positions: int | None = None  # the model's positions (max_position_embeddings); None when it names none

    @property
    def eos_token_ids(self) -> set[int]:
        return set(self.tokenizer.eos_token_ids)


def list_models() -> list[str]:
    """Names ``load_model`` accepts (a local mlx-lm model directory path is accepted too)."""
    return [DEFAULT_MODEL, *(SYNTHETIC_PREFIX + name for name in SYNTHETIC_CONFIGS)]


def _choices_text() -> str:
    return ", ".join(list_models()) + ", or a local mlx-lm model directory (config.json + *.safetensors)"


def resolve_model_name(name: str) -> tuple[str, str]:
    """(kind, canonical name) with kind in {"gguf", "synthetic", "local"}; ValueError for anything else."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"model name must be a non-empty string; choose one of: {_choices_text()}")
    name = name.strip()
    if name.lower() in _DEFAULT_ALIASES:
        return "gguf", DEFAULT_MODEL
    if name.startswith(SYNTHETIC_PREFIX):
        preset = name.removeprefix(SYNTHETIC_PREFIX)
        if preset not in SYNTHETIC_CONFIGS:
            raise ValueError(f"unknown synthetic model {preset!r}; synthetic choices: "
                             f"{', '.join(SYNTHETIC_PREFIX + n for n in SYNTHETIC_CONFIGS)}")
        return "synthetic", name
    if os.path.isdir(name):
        _local_config(name)
        return "local", os.path.abspath(name)
    if os.path.sep in name or name.startswith("."):
        raise ValueError(f"model directory {name!r} does not exist")
    raise ValueError(f"unknown model {name!r}; choose one of: {_choices_text()}")


def _local_config(path: str) -> dict:
    """The parsed config.json of a local mlx-lm model directory, checked for what loading needs before anything
    loads: a JSON object with a ``model_type`` and ``model*.safetensors`` weights (ValueError, one line)."""
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise ValueError(f"{path!r} is a directory but not an mlx-lm model (no config.json)")
    try:
        with open(config_path, "rb") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{config_path!r} is not readable JSON: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str) or not config["model_type"]:
        raise ValueError(f"{config_path!r} names no model_type; not an mlx-lm model config")
    if not glob.glob(os.path.join(glob.escape(path), "model*.safetensors")):
        raise ValueError(f"{path!r} has no model*.safetensors weights")
    return config


def max_positions(name: str) -> int | None:
    """The model's positions (``max_position_embeddings`` / GGUF ``llama.context_length``) read without loading it
    or importing mlx, or None when the model does not say. ValueError for a name ``resolve_model_name`` refuses."""
    kind, canonical = resolve_model_name(name)
    if kind == "synthetic":
        value = SYNTHETIC_CONFIGS[canonical.removeprefix(SYNTHETIC_PREFIX)].get("max_position_embeddings")
    elif kind == "local":
        value = _local_config(canonical).get("max_position_embeddings")
    else:
        from .gguf_metadata import gguf_metadata
        from .gguf_smollm2 import locate_gguf

        try:
            value = gguf_metadata(locate_gguf()).get("llama.context_length")
        except (OSError, ValueError):
            return None  # the loader reports a missing or broken file with its own words
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _resolve_dtype_device(kind: str, dtype: str | None, device: str | None) -> tuple[str, str]:
    """Validated (dtype, device). Defaults: the current MLX device; float32 on CPU; on GPU bfloat16, except
    float16 for the GGUF model (its scales/biases are float16, and bf16 activations measurably hurt this small
    model: max logit error vs fp32 6.5 in bf16 against 0.75 in fp16 on a 10-token probe)."""
    import mlx.core as mx

    if device is not None and device not in _DEVICES:
        raise ValueError(f"device must be one of {_DEVICES}, got {device!r}")
    if device == "gpu" and not mx.is_available(mx.gpu):
        raise ValueError("device 'gpu' requested but this MLX build has no GPU backend (Metal/CUDA)")
    device = device or ("gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu")
    if dtype is not None and dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(set(_DTYPES))}, got {dtype!r}")
    gpu_default = "float16" if kind == "gguf" else "bfloat16"
    dtype = _DTYPES[dtype] if dtype else ("float32" if device == "cpu" else gpu_default)
    return dtype, device


def _geometry(model) -> dict[str, int]:
    """num_layers / n_kv_heads / head_dim / vocab_size from an mlx-lm model's args (standard attention)."""
    args = getattr(model, "args", None)
    if args is None or not hasattr(args, "num_attention_heads") or not hasattr(model, "layers"):
        raise ValueError(f"{type(model).__module__} has no standard attention geometry (args.num_attention_heads, "
                         "layers); slabscope's paged cache needs one")
    heads = int(args.num_attention_heads)
    head_dim = getattr(args, "head_dim", None) or int(args.hidden_size) // heads
    n_kv = getattr(args, "num_key_value_heads", None) or heads
    return {"num_layers": len(model.layers), "n_kv_heads": int(n_kv), "head_dim": int(head_dim),
            "vocab_size": int(args.vocab_size)}


def parameter_bytes(model) -> int:
    """Bytes of every parameter array of ``model`` as stored (packed uint32 + scales + biases when quantized)."""
    from mlx.utils import tree_flatten

    return sum(value.nbytes for _, value in tree_flatten(model.parameters()))


def _load_local(path: str, dtype, keep_quantized: bool):
    """mlx-lm's own loader; a quantized checkpoint is dequantized unless ``keep_quantized``; floats cast to dtype."""
    from mlx_lm.utils import dequantize_model, load

    try:
        model, tokenizer, config = load(path, return_config=True)
    except Exception as exc:  # noqa: BLE001 - a user's directory: whatever mlx-lm trips on is one line
        raise ValueError(f"could not load the mlx-lm model in {path!r}: {type(exc).__name__}: {exc}") from None
    quant = config.get("quantization")
    if quant and not keep_quantized:
        model = dequantize_model(model)
    model.set_dtype(dtype)
    return model, tokenizer, {"source": path, "quantization": {"config": quant,
                                                               "kept_quantized": bool(quant) and keep_quantized}}


def _load_kind(kind: str, name: str, mx_dtype, seed: int, keep_quantized: bool):
    if kind == "gguf":
        from .gguf_smollm2 import load_smollm2

        return load_smollm2(dtype=mx_dtype, keep_quantized=keep_quantized)
    if kind == "synthetic":
        from .synthetic import ByteTokenizer, build_synthetic

        config = SYNTHETIC_CONFIGS[name.removeprefix(SYNTHETIC_PREFIX)]
        model = build_synthetic(config, seed=seed, dtype=mx_dtype)
        info = {"source": f"seeded random weights (seed {seed})", "seed": seed, "config": dict(config),
                "quantization": {"kept_quantized": False}}
        return model, ByteTokenizer(int(config["vocab_size"])), info
    return _load_local(name, mx_dtype, keep_quantized)


def load_model(name: str = DEFAULT_MODEL, *, dtype: str | None = None, device: str | None = None,
               seed: int = 0, quantized: bool | None = None) -> LoadedModel:
    """Load a model by name (see ``list_models``) for ``device`` with activations in ``dtype``.

    Calls ``enable_openblas()`` first (effective only if mlx is not imported yet). ``device`` given: sets MLX's
    default device (process-global). ``quantized``: None = keep quantized weights on GPU and dequantize on CPU;
    True/False forces it (GGUF and local models). ``seed`` only matters for synthetic models.
    """
    kind, canonical = resolve_model_name(name)
    enable_openblas()
    import mlx.core as mx

    dtype_name, device_name = _resolve_dtype_device(kind, dtype, device)
    previous_device = mx.default_device()
    if device is not None:
        mx.set_default_device(mx.gpu if device_name == "gpu" else mx.cpu)
    start = time.perf_counter()
    keep_quantized = quantized if quantized is not None else device_name != "cpu"
    try:
        model, tokenizer, info = _load_kind(kind, canonical, getattr(mx, dtype_name), seed, keep_quantized)
        mx.eval(model.parameters())
    except BaseException:
        mx.set_default_device(previous_device)  # a failed load leaves the process as it found it
        raise
    info.update({"kind": kind, "blas": describe_device_blas(), "load_s": round(time.perf_counter() - start, 3)})
    positions = getattr(model.args, "max_position_embeddings", None)
    return LoadedModel(model=model, tokenizer=tokenizer, name=canonical, family=str(model.args.model_type),
                       dtype=dtype_name, device=device_name, weight_bytes=parameter_bytes(model), info=info,
                       max_positions=int(positions) if positions else None, **_geometry(model))
