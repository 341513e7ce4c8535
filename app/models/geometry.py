"""A model's declared geometry without loading it (mlx-free): what a launcher checks before starting ranks.

``declared_geometry(name)`` reads the synthetic preset, a local directory's ``config.json`` or the embedded GGUF's
header (only its metadata key/value section: a few hundred KB, no tensors). ``shard_problem(geometry, ranks)``
says, in one line, why mlx-lm's tensor-parallel ``Model.shard()`` cannot split the model ``ranks`` ways (it
splits Q/K/V heads and the MLP's hidden width into equal contiguous parts), or None when it can.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

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

    meta = read_gguf_metadata(str(locate_gguf()))
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


# ---- GGUF metadata (the format's key/value header; spec: ggml docs/gguf.md) -------------------------------------
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    def __init__(self, fh):
        self.fh = fh

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        data = self.fh.read(size)
        if len(data) != size:
            raise ValueError("GGUF header ends early")
        return struct.unpack(fmt, data)[0]

    def string(self) -> str:
        return self.fh.read(self.take("<Q")).decode("utf-8", errors="replace")

    def value(self, vtype: int):
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, count = self.take("<I"), self.take("<Q")
            if item_type in _SCALARS:  # skipped: only scalar keys are wanted
                self.fh.seek(count * struct.calcsize(_SCALARS[item_type]), os.SEEK_CUR)
            else:
                for _ in range(count):
                    self.value(item_type)
            return None
        raise ValueError(f"GGUF value type {vtype} is unknown")


def read_gguf_metadata(path: str) -> dict:
    """The scalar and string key/values of a GGUF file's header (arrays are skipped)."""
    with open(path, "rb") as fh:
        reader = _Reader(fh)
        if fh.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version = reader.take("<I")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        reader.take("<Q")  # tensor count
        out = {}
        for _ in range(reader.take("<Q")):
            key = reader.string()
            value = reader.value(reader.take("<I"))
            if value is not None:
                out[key] = value
        return out
