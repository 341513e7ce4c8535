"""Format v1's untyped payloads <-> the typed records (mlx-free).

Recordings written before the typed data model (format v1) hold JSON dicts: ops ``{"op", ..., "t", "i"}``, pool
snapshots with ``num_slabs`` and string keys, book states. ``*_from_v1`` turn them into the typed records through
``msgspec.convert`` (validated: a wrong type or a missing field raises ``msgspec.ValidationError``).
"""

from __future__ import annotations

import msgspec

from pool import AnyOp, BookState, Op, PoolSnapshot

_OP_STAMPS = ("t", "i")


def op_from_v1(op: dict) -> Op:
    """A v1 op dict (stamps ``t``/``i`` allowed) as a typed op."""
    if not isinstance(op, dict):
        raise msgspec.ValidationError(f"an op must be a dict, got {type(op).__name__}")
    return msgspec.convert({k: v for k, v in op.items() if k not in _OP_STAMPS}, AnyOp)


def snapshot_from_v1(snap: dict) -> PoolSnapshot:
    """A v1 snapshot (full or summary) as a typed one: ``num_slabs`` was the name of ``num_chunks``."""
    if not isinstance(snap, dict) or not isinstance(snap.get("layers"), list):
        raise msgspec.ValidationError("a pool snapshot must be a dict with a list of layers")
    layers = [_layer_from_v1(layer) for layer in snap["layers"]]
    return msgspec.convert(dict(snap, layers=layers), PoolSnapshot, strict=False)


def _layer_from_v1(layer: dict) -> dict:
    if not isinstance(layer, dict):
        raise msgspec.ValidationError("a snapshot layer must be a dict")
    out = {k: v for k, v in layer.items() if k != "num_slabs"}
    out.setdefault("num_chunks", layer.get("num_slabs"))
    return out


def book_state_from_v1(state: dict) -> BookState:
    return msgspec.convert(state, BookState, strict=False)


# ---- typed -> v1 (the wire and file shape until format v2 lands) ---------------------------------------------
def op_to_v1(op: Op) -> dict:
    return msgspec.to_builtins(op)


def snapshot_to_v1(snap: PoolSnapshot) -> dict:
    out = msgspec.to_builtins(snap, str_keys=True)
    for layer in out["layers"]:
        layer["num_slabs"] = layer.pop("num_chunks")
        if layer.get("row_owner") is None:
            layer.pop("row_owner", None)
            layer.pop("row_refcount", None)
    if out.get("seq_rows") is None:
        out.pop("seq_rows", None)
    return out
