"""Format v1's untyped payloads -> the typed records (mlx-free; ``probes.codec`` calls these).

Recordings written before the typed data model (format v1) hold JSON dicts: ops ``{"op", ..., "t", "i"}``, pool
snapshots with ``num_slabs`` and string keys, book states. ``*_from_v1`` turn them into the typed records through
``msgspec.convert`` (validated: a wrong type or a missing field raises ``msgspec.ValidationError``); keyframes into
the shapes of their time (``probes.legacy``), which hold the rows once per layer.
"""

from __future__ import annotations

from typing import Union

import msgspec

from pool import AnyOp, Op
from probes.events import MetaUpdate, timeline_types
from probes.legacy import BookStateV2, PoolSnapshotV2

_OP_STAMPS = ("t", "i")


def op_from_v1(op: dict) -> Op:
    """A v1 op dict (stamps ``t``/``i`` allowed) as a typed op."""
    return ops_from_v1([op])[0]


def ops_from_v1(ops: list) -> list[Op]:
    """v1 op dicts as typed ops (one validated conversion for the whole list)."""
    if not all(isinstance(op, dict) for op in ops):
        raise msgspec.ValidationError("an op must be a dict")
    return msgspec.convert([{k: v for k, v in op.items() if k not in _OP_STAMPS} for op in ops], list[AnyOp])


def snapshot_from_v1(snap: dict) -> PoolSnapshotV2:
    """A v1 snapshot (full or summary) as a typed one of its time (rows per layer: ``probes.legacy`` reads it
    through layer 0): ``num_slabs`` was the name of ``num_chunks``."""
    return msgspec.convert(adapted_snapshot(snap), PoolSnapshotV2, strict=False)


def adapted_snapshot(snap: dict) -> dict:
    """A v1 snapshot dict with today's field names (converted by the caller, possibly in bulk)."""
    if not isinstance(snap, dict) or not isinstance(snap.get("layers"), list):
        raise msgspec.ValidationError("a pool snapshot must be a dict with a list of layers")
    return dict(snap, layers=[_layer_from_v1(layer) for layer in snap["layers"]])


def _layer_from_v1(layer: dict) -> dict:
    if not isinstance(layer, dict):
        raise msgspec.ValidationError("a snapshot layer must be a dict")
    out = {k: v for k, v in layer.items() if k != "num_slabs"}
    out.setdefault("num_chunks", layer.get("num_slabs"))
    return out


def book_state_from_v1(state: dict) -> BookStateV2:
    """A v1 book state as a typed one of its time (one copy per layer: ``probes.legacy`` reads it through layer 0)."""
    return msgspec.convert(state, BookStateV2, strict=False)


def events_from_v1(events: list) -> list:
    """v1 EVENTS items as typed events (one validated conversion for the whole list): ``gather`` events held
    ``layer_runs`` dicts keyed by sequence, a ``meta`` item is metadata added after the start."""
    return msgspec.convert([_adapted_event(event) for event in events], list[Union[(*timeline_types(), MetaUpdate)]])


def _adapted_event(event: dict) -> dict:
    if not isinstance(event, dict):
        raise msgspec.ValidationError(f"an event must be a dict, got {type(event).__name__}")
    kind = event.get("kind")
    if kind == "meta":
        stamps = {k: event[k] for k in ("t", "step", "tokens") if k in event}
        return dict(stamps, kind="meta", meta={k: v for k, v in event.items() if k not in ("kind", *stamps)})
    if kind == "gather":
        runs = event.get("layer_runs") or {}
        ids = [str(seq) for seq in event.get("seq_ids", [])]
        event = {k: v for k, v in event.items() if k != "layer_runs"}
        event.update(runs_layer0=[runs["0"][seq] for seq in ids], runs_max=[runs["max"][seq] for seq in ids])
    return event
