"""Checks on the META and END blocks slabscope itself reads (the rest of both is free-form), mlx-free.

``probes.codec`` calls ``check_meta`` for a META record and for every ``MetaUpdate`` an EVENTS record carries (metadata
added later, merged into the META when a session is replayed): the typed ``Meta`` fields (times and rates finite, the
pool geometry what-if builds a book from; a rank recording's ``distributed`` block, which ``probes.ranks`` merges
runs by) and ``check_end`` for an END record (its time; the probe-cost and outputs blocks compare and the reports
read). Each block is converted to a typed Struct (a wrong type is a ``msgspec.ValidationError``) and checked for
what a type cannot say (``ValueError``); ``codec.decode`` turns either into the one-line ``RecordingError``.
"""

from __future__ import annotations

import math

import msgspec

from pool.config import DESIGNS, MAX_DIMENSION
from probes import limits
from probes.bounds import check_counts, check_meta_figures, check_probe_overhead
from probes.checks import check_count, check_finite, check_time
from probes.events import ProbeOverhead

class _Clock(msgspec.Struct):
    offset_s: float = 0.0
    bound_s: float = 0.0


class _Shard(msgspec.Struct):
    kv_heads: tuple[int, int] | None = None
    n_kv_heads_total: int | None = None
    kv_bytes_per_token: int | float | None = None


class _DeviceMemory(msgspec.Struct):
    bytes: int | float | None = None


class DistributedBlock(msgspec.Struct):
    """``meta["distributed"]`` of a rank recording, as ``probes.ranks`` reads it."""

    run_id: str | int | None = None
    rank: int | None = None
    world_size: int | None = None
    host: str | None = None
    pid: int | None = None
    device_memory: _DeviceMemory | None = None
    shard: _Shard | None = None
    clock: _Clock | None = None


class OutputsBlock(msgspec.Struct):
    """``summary["outputs"]`` of an END record: what the run generated (``probes.ranks`` compares it)."""

    digest: str
    requests: int = 0
    generated_tokens: int = 0
    generated: dict[str, list[int]] | None = None


MAX_RANKS = 4096


def check_meta(meta: dict, typed) -> None:
    """The META fields slabscope reads: ``typed`` (``codec.Meta``: times and rates finite, the pool geometry) and
    a rank recording's ``distributed`` block (a rank inside its world, clock figures finite)."""
    for name in ("t_start", "sample_hz", "snapshot_hz"):
        value = getattr(typed, name)
        if value is not None and not math.isfinite(value):
            raise ValueError(f"metadata {name} {value} is not finite")
    check_meta_geometry(typed.geometry)
    check_meta_figures(meta)  # the memory figures the session's bounds come from (an ImpossibleValue)
    if isinstance(meta.get("distributed"), dict):
        block = msgspec.convert(meta["distributed"], DistributedBlock)
        if block.rank is not None and not (block.world_size is not None and 0 <= block.rank < block.world_size
                                           <= MAX_RANKS):
            raise ValueError(f"rank {block.rank} of a world of {block.world_size} (at most {MAX_RANKS} ranks)")
        if block.clock is not None:
            check_finite([block.clock.offset_s, block.clock.bound_s], "the rank clock")


def check_end(record) -> None:
    """An END record: its time, and the summary blocks slabscope reads (probe cost, outputs)."""
    check_time(record.t, "the end record")
    summary = record.summary
    if "probe_overhead" in summary:
        overhead = msgspec.convert(summary["probe_overhead"], ProbeOverhead)
        check_finite([getattr(overhead, f) for f in overhead.__struct_fields__], "the probe cost")
        check_probe_overhead(overhead)
    if summary.get("outputs") is not None:
        outputs = msgspec.convert(summary["outputs"], OutputsBlock)
        check_counts((outputs.requests, outputs.generated_tokens), "the outputs' count")
        for req in outputs.generated or {}:
            int(req)  # ValueError: request ids are integers (outputs are compared in request order)


def check_meta_geometry(geometry) -> None:
    """The pool geometry of a META record (what-if builds a book from it)."""
    if geometry is None:
        return
    if geometry.design not in DESIGNS:
        raise ValueError(f"unknown pool design {geometry.design!r}")
    check_count(geometry.num_layers, "geometry num_layers", limits.MAX_LAYERS)
    for name in ("num_layers", "block_size", "slab_blocks"):
        if not 1 <= getattr(geometry, name) <= MAX_DIMENSION:
            raise ValueError(f"geometry {name} {getattr(geometry, name)} is outside [1, {MAX_DIMENSION}]")
