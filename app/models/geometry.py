"""A model's declared geometry without loading it (mlx-free): what a launcher checks before starting ranks.

``declared_geometry(name)`` reads the synthetic preset, a local directory's ``config.json`` or the embedded GGUF's
header (its metadata, read by the gguf package: ``app.models.gguf_metadata``; no tensors). ``shard_problem(geometry, ranks)``
says, in one line, why mlx-lm's tensor-parallel ``Model.shard()`` cannot split the model ``ranks`` ways (it
splits Q/K/V heads and the MLP's hidden width into equal contiguous parts), or None when it can.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .gguf_metadata import gguf_metadata
from .registry import resolve_model_name
from .synthetic import SYNTHETIC_CONFIGS


@dataclass(frozen=True)
class ModelGeometry:
    family: str
    num_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int


def _from_config(config: dict) -> ModelGeometry:
    heads = int(config["num_attention_heads"])
    return ModelGeometry(family=str(config.get("model_type", "?")), num_layers=int(config["num_hidden_layers"]),
                         n_heads=heads, n_kv_heads=int(config.get("num_key_value_heads") or heads),
                         head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
                         intermediate_size=int(config["intermediate_size"]))


def declared_geometry(name: str) -> ModelGeometry:
    """Geometry of a model ``load_model`` accepts; ValueError (one line) for unknown or unreadable models."""
    kind, canonical = resolve_model_name(name)
    if kind == "synthetic":
        return _from_config(SYNTHETIC_CONFIGS[canonical.split(":", 1)[1]])
    if kind == "local":
        try:
            with open(os.path.join(canonical, "config.json")) as fh:
                return _from_config(json.load(fh))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{canonical}/config.json: cannot read the model geometry ({exc})") from None
    from .gguf_smollm2 import locate_gguf

    meta = gguf_metadata(locate_gguf())
    try:
        heads = int(meta["llama.attention.head_count"])
        hidden = int(meta["llama.embedding_length"])
        return ModelGeometry(family="llama", num_layers=int(meta["llama.block_count"]), n_heads=heads,
                             n_kv_heads=int(meta.get("llama.attention.head_count_kv", heads)),
                             head_dim=int(meta.get("llama.rope.dimension_count", hidden // heads)),
                             intermediate_size=int(meta["llama.feed_forward_length"]))
    except KeyError as exc:
        raise ValueError(f"the embedded GGUF lacks {exc.args[0]!r} in its metadata") from None


def shard_problem(geometry: ModelGeometry, ranks: int, name: str | None = None) -> str | None:
    """Why ``ranks``-way tensor parallelism cannot split ``geometry`` (model ``name``) evenly (one line), or None."""
    if ranks == 1:
        return None
    parts = (("KV heads", geometry.n_kv_heads), ("attention heads", geometry.n_heads),
             ("MLP hidden width", geometry.intermediate_size))
    for what, count in parts:
        if count % ranks:
            model = f"{name} ({geometry.family})" if name else f"the {geometry.family} model"
            return (f"{model} has {count} {what}, which do not split evenly across {ranks} ranks "
                    f"(tensor parallel needs a divisor of {count})")
    return None
