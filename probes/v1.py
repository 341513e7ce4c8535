"""Format v1's untyped payloads -> the typed records (mlx-free; ``probes.codec`` calls these).

Recordings written before the typed data model (format v1) hold JSON dicts: ops ``{"op", ..., "t", "i"}``, pool
snapshots with ``num_slabs`` and string keys, book states. ``*_from_v1`` turn them into the typed records through
``msgspec.convert`` (validated: a wrong type or a missing field raises ``msgspec.ValidationError``).
"""

from __future__ import annotations

from typing import Union

import msgspec

from pool import AnyOp, BookState, Op, PoolSnapshot
from probes.events import MetaUpdate, timeline_types

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


def event_from_v1(event: dict):
    """A v1 EVENTS item as a typed event: ``gather`` events held ``layer_runs`` dicts keyed by sequence, a ``meta``
    item is metadata added after the start."""
    if not isinstance(event, dict):
        raise msgspec.ValidationError(f"an event must be a dict, got {type(event).__name__}")
    kind = event.get("kind")
    if kind == "meta":
        stamps = {k: event[k] for k in ("t", "step", "tokens") if k in event}
        meta = {k: v for k, v in event.items() if k not in ("kind", "t", "step", "tokens")}
        return msgspec.convert(dict(stamps, kind="meta", meta=meta), MetaUpdate)
    if kind == "gather":
        runs = event.get("layer_runs") or {}
        ids = [str(seq) for seq in event.get("seq_ids", [])]
        event = {k: v for k, v in event.items() if k != "layer_runs"}
        event.update(runs_layer0=[runs["0"][seq] for seq in ids], runs_max=[runs["max"][seq] for seq in ids])
    return msgspec.convert(event, Union[timeline_types()])
