"""The physical bounds of every figure a recording holds, in one place (mlx-free).

A recording's numbers become figures: peaks, ratios, tokens per second, what-if sizes, slab counts, the TUI's
charts. A number of the right type with a valid checksum can still be impossible: a sample's ``rss_other`` of
2^64 - 1 bytes made ``whatif`` report 17,592,186,044,961 MiB. So every numeric field that becomes a figure is
bounded here, by what the machine or the run could hold:

* **memory** (bytes of every sample, pool byte figures, a shrink's bytes, a copied op's bytes, a keyframe's rows):
  ``FigureBounds.memory_bytes``, the RAM, swap and device memory the recording's machine had (its metadata's
  ``host_memory`` and ``device_limits``: everything an allocation can live in), or ``MAX_MEMORY_BYTES`` for a
  recording made before its machine's memory was recorded. The accounting parts of a sample (``weights``,
  ``pool_live``, ``pool_free``, ``other_active``, ``rss_other``) are signed (probes/sampler.py): their magnitude
  is bounded.
* **counts** (steps, tokens, blocks, rows, slabs, gathers): never negative; a step's batch and tokens within the
  run limits (``app/workloads/limits.py``, mirrored below: probes may not import app; a test keeps them equal);
  other counters within ``MAX_COUNT``.
* **times and fractions**: a step's wall time and a shrink's seconds within a session time; fragmentation and a
  probe's cost fraction within [0, 1] and [0, 2] (two threads' time over the wall).

A value outside its bound raises ``ImpossibleValue``; ``probes.codec.decode`` reports the record as damage
(``probes.errors.ImpossibleRecord``): the reader keeps the records before it, like a record with a bad checksum,
so no figure is computed from it (docs/recording-format.md, "Impossible values").
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import msgspec

from pool.units import format_bytes
from probes import limits

MAX_MEMORY_BYTES = 2**50       # 1 PiB: more memory than any one machine holds (the bound when a recording does not
                               # say what its machine had)
MAX_COUNT = 2**48              # steps, tokens, counters: 9 years at a million tokens a second
MAX_CUMULATIVE = 2**63 - 1     # a pool counter summed over a session (bytes copied: not bounded by the memory)
# The run limits a recording's counts cannot pass (app/workloads/limits.py; tests/probes/test_figure_bounds.py
# keeps these equal to it).
MAX_CONCURRENCY = 4_096                # sequences in one step
MAX_REQUEST_TOKENS = 1 << 20           # prompt or generated tokens of one request
MAX_PHASE_REQUESTS = 100_000           # requests (conversation turns) of one phase
MAX_STEP_TOKENS = MAX_CONCURRENCY * MAX_REQUEST_TOKENS               # tokens of one forward pass
MAX_SEQUENCE_TOKENS = MAX_PHASE_REQUESTS * 2 * MAX_REQUEST_TOKENS    # a conversation's last turn holds every turn
MAX_PROBE_COST_FRACTION = 2.0  # the probe thread's CPU time plus the workload thread's time in probes, over the wall

SAMPLE_BYTES = ("active", "cache", "footprint", "peak", "footprint_max", "rss", "rss_max", "sys_available")
# the accounting parts are signed (probes/sampler.py: a negative part is shown, never clamped; pool_free is reserved
# minus in-use bytes, read at one sample from two counters): their magnitude is bounded
SAMPLE_SIGNED_BYTES = ("weights", "pool_live", "pool_free", "other_active", "rss_other")


class ImpossibleValue(ValueError):
    """A figure no machine or run could produce (the record holding it is damage, not data)."""


def _memory_figure(block, key: str) -> int | None:
    value = block.get(key) if isinstance(block, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class FigureBounds:
    """What a session's memory figures may reach: ``memory_bytes``, and ``source`` saying why (for messages)."""

    memory_bytes: int = MAX_MEMORY_BYTES
    source: str = "1.0 PiB, more than any one machine holds"

    @classmethod
    def of(cls, meta: dict) -> "FigureBounds":
        """The bounds of a session from its metadata (checked first by ``check_meta_figures``)."""
        ram = _memory_figure(meta.get("host_memory"), "ram_bytes")
        if not ram:
            return cls()
        swap = _memory_figure(meta.get("host_memory"), "swap_bytes") or 0
        device = _memory_figure(meta.get("device_limits"), "memory_bytes") or 0
        parts = [f"{format_bytes(ram)} of RAM", f"{format_bytes(swap)} of swap"]
        if device:
            parts.append(f"{format_bytes(device)} of device memory")
        return cls(ram + swap + device, f"the {', '.join(parts)} its machine had")


DEFAULT_BOUNDS = FigureBounds()


def _outside(value, lo, hi) -> bool:
    return not lo <= value <= hi  # NaN is outside too


def _bytes_problem(what: str, value, bounds: FigureBounds, signed: bool = False) -> str:
    limit = bounds.memory_bytes
    side = "beyond" if value > 0 else "below"
    bound = f"{'-' if value < 0 else ''}{format_bytes(limit)}, {bounds.source}" if signed or value > 0 else "0"
    return f"{what} {value:,} bytes is {side} {bound}"


def check_bytes(value, what: str, bounds: FigureBounds, signed: bool = False) -> None:
    """A byte figure within [0, memory] (``signed``: [-memory, memory])."""
    limit = bounds.memory_bytes
    if _outside(value, -limit if signed else 0, limit):
        raise ImpossibleValue(_bytes_problem(what, value, bounds, signed))


def check_counts(values: list, what: str, most: int = MAX_COUNT, least: int = 0) -> None:
    """Counts (a list or tuple) within [least, most]."""
    if values and (min(values) < least or max(values) > most):
        bad = next(v for v in values if _outside(v, least, most))
        raise ImpossibleValue(f"{what} {bad:,} is outside [{least:,}, {most:,}]")


def check_seconds(value, what: str) -> None:
    if _outside(value, 0.0, limits.MAX_SESSION_S):
        raise ImpossibleValue(f"{what} {value!r} s is outside [0, {limits.MAX_SESSION_S:g}] s")


def check_all_seconds(values: list, what: str) -> None:
    """Durations (a list of finite floats) within [0, a session's time]."""
    if values and (min(values) < 0.0 or max(values) > limits.MAX_SESSION_S):
        check_seconds(next(v for v in values if _outside(v, 0.0, limits.MAX_SESSION_S)), what)


# ---- samples (columns) -------------------------------------------------------------------------------------------
def check_sample_columns(columns: dict[str, list], bounds: FigureBounds) -> None:
    """Every sample figure within its bound. ``columns`` are complete and finite
    (``probes.checks.complete_columns``). Opening a long session runs this once per SAMPLES record (7 200 an
    hour), so the common case is a few C-level min/max calls over joined columns; which figure broke the bound is
    looked for only then."""
    limit = bounds.memory_bytes
    unsigned = list(chain.from_iterable(columns[name] for name in SAMPLE_BYTES))
    signed = list(chain.from_iterable(columns[name] for name in SAMPLE_SIGNED_BYTES))
    counts = columns["step"] + columns["tokens"] + [n for n in columns["pool_slabs"] if n is not None]
    cost = columns["cost_us"]
    if unsigned and (min(unsigned) < 0 or max(unsigned) > limit or min(signed) < -limit or max(signed) > limit
                     or min(counts) < 0 or max(counts) > min(MAX_COUNT, limit)
                     or min(cost) < 0 or max(cost) > limits.MAX_SESSION_S * 1e6):
        _sample_problem(columns, bounds)


def _sample_problem(columns: dict[str, list], bounds: FigureBounds) -> None:
    """Raise ``ImpossibleValue`` naming the first sample figure outside its bound."""
    limit = bounds.memory_bytes
    for names, lo in ((SAMPLE_BYTES, 0), (SAMPLE_SIGNED_BYTES, -limit)):
        for name in names:
            value = next((v for v in columns[name] if _outside(v, lo, limit)), None)
            if value is not None:
                raise ImpossibleValue(_bytes_problem(f"a sample's {name}", value, bounds, signed=lo < 0))
    check_counts(columns["step"], "a sample's step")
    check_counts(columns["tokens"], "a sample's tokens")
    check_counts([n for n in columns["pool_slabs"] if n is not None], "a sample's pool_slabs", limit)
    cost = next(v for v in columns["cost_us"] if _outside(v, 0, limits.MAX_SESSION_S * 1e6))
    raise ImpossibleValue(f"a sample's cost_us {cost!r} is outside [0, {limits.MAX_SESSION_S * 1e6:g}] us")


# ---- timeline events ---------------------------------------------------------------------------------------------
def check_event_figures(events: list, bounds: FigureBounds) -> None:
    """Every event's counters and figures. Events are grouped by type and each figure is checked with one min
    and one max over its column (a long session holds tens of thousands of steps: no call per event)."""
    from probes.events import WorkerError

    counters = [e.step for e in events] + [e.tokens for e in events]
    if counters and (min(counters) < 0 or max(counters) > MAX_COUNT):
        plain = [e for e in events if type(e) is not WorkerError]  # a death the parent saw is stamped -1, -1
        check_counts([e.step for e in plain] + [e.tokens for e in plain], "an event's step or tokens")
        check_counts(counters, "an error's counters", least=-1)
    checks, by_type = _event_checks(), {}
    for event in events:
        if type(event) in checks:
            by_type.setdefault(type(event), []).append(event)
    for kind, group in by_type.items():
        checks[kind](group, bounds)


def _check_steps(steps: list, bounds: FigureBounds) -> None:
    check_counts([e.batch for e in steps], "a step's batch", MAX_CONCURRENCY)
    check_counts([e.num_tokens for e in steps], "a step's tokens", MAX_STEP_TOKENS)
    check_all_seconds([e.wall_s for e in steps], "a step's wall time")


def _check_gathers(gathers: list, bounds: FigureBounds) -> None:
    check_counts([n for e in gathers for n in (*e.runs_layer0, *e.runs_max)], "a gather event's runs")
    check_counts([e.fused_layers for e in gathers], "a gather event's fused layers", limits.MAX_LAYERS)
    check_counts([n for e in gathers for n in e.seq_ids], "a gather event's sequence id")


def _event_checks() -> dict:
    """Event type -> the check of a group of them (the types with figures of their own)."""
    if not _EVENT_CHECKS:
        from probes.events import ClockSync, Dropped, FusedChange, GatherRuns, ProbeStats, RequestDone, Shrunk, Step

        _EVENT_CHECKS.update({
            Step: _check_steps, GatherRuns: _check_gathers,
            FusedChange: lambda group, _: check_counts([e.layer for e in group], "a fused decision's layer",
                                                       limits.MAX_LAYERS - 1),
            Dropped: lambda group, _: check_counts([n for e in group for n in (e.batches, e.events)],
                                                   "dropped batches or events"),
            RequestDone: lambda group, _: [_check_request(e) for e in group],
            ClockSync: lambda group, _: [_check_clock(e) for e in group],
            Shrunk: lambda group, b: [check_shrink_report(e.report, b) for e in group],
            ProbeStats: lambda group, _: [check_probe_overhead(e.overhead) for e in group]})
    return _EVENT_CHECKS


_EVENT_CHECKS: dict = {}


NO_SEQUENCE = -1  # RequestDone.seq_id of a request that ended before it got a sequence (cancelled while waiting)


def _check_request(event) -> None:
    check_counts((event.prompt_tokens, event.generated_tokens, event.shared_tokens), "a request's tokens",
                 MAX_SEQUENCE_TOKENS)
    check_counts((event.req_id,), "a request's id")
    check_counts((event.seq_id,), "a request's sequence id", least=NO_SEQUENCE)
    if event.shared_tokens > event.prompt_tokens:
        raise ImpossibleValue(f"a request shares {event.shared_tokens:,} tokens of a {event.prompt_tokens:,}-token "
                              "prompt")


def _check_clock(event) -> None:
    for name in ("offset_s", "residual_s"):
        if _outside(abs(getattr(event, name)), 0.0, limits.MAX_SESSION_S):
            raise ImpossibleValue(f"a clock sync's {name} {getattr(event, name)!r} s is beyond a session's time")
    check_seconds(event.bound_s, "a clock sync's bound")


def check_shrink_report(report, bounds: FigureBounds) -> None:
    for name in ("bytes_moved", "bytes_moved_model", "bytes_released", "trimmed_bytes", "footprint_before",
                 "footprint_after"):
        check_bytes(getattr(report, name), f"a shrink's {name}", bounds)
    check_counts((report.blocks_moved, report.slabs_released), "a shrink's block or slab count")
    for name in ("move_s", "release_s", "trim_s"):
        check_seconds(getattr(report, name), f"a shrink's {name}")


def check_probe_overhead(overhead) -> None:
    for name in ("wall_s", "probe_thread_cpu_s", "workload_thread_s"):
        check_seconds(getattr(overhead, name), f"the probe cost's {name}")
    if _outside(overhead.cost_fraction, 0.0, MAX_PROBE_COST_FRACTION):
        raise ImpossibleValue(f"the probe cost fraction {overhead.cost_fraction!r} is outside "
                              f"[0, {MAX_PROBE_COST_FRACTION:g}]")
    if _outside(overhead.sample_cost_us_mean, 0.0, limits.MAX_SESSION_S * 1e6) or \
            _outside(overhead.snapshot_cost_ms_mean, 0.0, limits.MAX_SESSION_S * 1e3):
        raise ImpossibleValue("a probe's mean cost is negative or beyond a session's time")
    check_counts((overhead.samples, overhead.snapshots, overhead.dropped_batches), "the probe cost's counts")


# ---- pool snapshots ----------------------------------------------------------------------------------------------
def check_snapshot_figures(snaps: list, bounds: FigureBounds) -> None:
    """Pool snapshots' figures (a record's worth at once): row, hole and chunk counts, fragmentation, gather
    histograms, stats and counters."""
    limit = bounds.memory_bytes
    for layer in [layer for snap in snaps for layer in snap.layers]:
        # the common case in one expression (a long session holds ~10^5 layer snapshots); _layer_problem says why
        if not (0 <= layer.largest_free_run <= layer.free_rows <= layer.capacity_rows <= limit
                and 0 <= layer.holes <= layer.free_rows and 0 <= layer.num_chunks <= layer.capacity_rows
                and 0.0 <= layer.fragmentation <= 1.0):
            raise ImpossibleValue(_layer_problem(layer, limit))
        hist = layer.gather_runs_hist
        if hist and (min(hist) < 0 or min(hist.values()) < 0):
            raise ImpossibleValue("a layer's gather-run histogram holds a negative run length or count")
    stats = [snap.stats for snap in snaps]
    check_counts([n for st in stats for n in (st.allocated_blocks, st.live_blocks, st.free_blocks, st.num_sequences,
                                             st.num_handles)], "a snapshot's block or sequence count", limit)
    for name, values in (("bytes_reserved", [st.bytes_reserved for st in stats]),
                         ("bytes_in_use", [st.bytes_in_use for st in stats]),
                         ("bytes_per_row", [snap.bytes_per_row for snap in snaps])):
        if values and (min(values) < 0 or max(values) > limit):
            check_bytes(next(v for v in values if _outside(v, 0, limit)), f"a snapshot's {name}", bounds)
    counters = [n for snap in snaps for n in msgspec.structs.astuple(snap.counters) if n is not None]
    check_counts(counters, "a snapshot's pool counter", MAX_CUMULATIVE)  # byte totals over a session add up


def _layer_problem(layer, limit: int) -> str:
    if min(layer.capacity_rows, layer.free_rows, layer.num_chunks, layer.holes, layer.largest_free_run) < 0:
        return "a layer with a negative row, hole or chunk count"
    if not 0.0 <= layer.fragmentation <= 1.0:
        return f"a layer's fragmentation {layer.fragmentation!r} is outside [0, 1]"
    if layer.capacity_rows > limit:
        return f"a layer of {layer.capacity_rows:,} rows, more than its machine's {format_bytes(limit)} could hold"
    return (f"a layer of {layer.capacity_rows:,} rows in {layer.num_chunks:,} chunks with {layer.free_rows:,} free, "
            f"{layer.holes:,} holes and a largest free run of {layer.largest_free_run:,}: more free rows, holes or "
            "chunks than rows")


# ---- the op log --------------------------------------------------------------------------------------------------
_OP_BYTES = {"copied": ("bytes", "cow_bytes", "moved_bytes"), "slab_append": ("bytes",), "grow": ("bytes_copied",),
             "storage_init": ("bytes_per_row",)}
_OP_COUNTS = {"slab_append": ("layers", "count"), "grow": ("layers", "old_rows", "new_rows")}
# (the ops whose figures a view shows: measured copies rebuild the copy counters, storage_init the byte figures of a
# replay, slab_append and grow are the trace's growth instants; row_mint and rows_freed are shown nowhere)


_CLASSES: dict[type, str] = {}


def _op_classes() -> dict[type, str]:
    """The op types whose figures are bounded, by class (tag as value)."""
    if not _CLASSES:
        import typing

        from pool import AnyOp

        for cls in typing.get_args(AnyOp):
            tag = cls.__struct_config__.tag
            if tag in _OP_BYTES or tag in _OP_COUNTS:
                _CLASSES[cls] = tag
    return _CLASSES


def check_op_figures(ops: list, bounds: FigureBounds) -> None:
    """The figures the op log adds to a rebuilt pool (measured copies, growth) within their bounds, one min and
    one max per field over the ops of its kind. Sequence ops are checked by replaying them (``pool.apply_op`` and
    the replay's row bound)."""
    classes = _op_classes()
    by_tag: dict[str, list] = {}
    for op in [op for op in ops if type(op) in classes]:  # a set test per op: 10^5 ops an hour
        by_tag.setdefault(classes[type(op)], []).append(op)
    for tag, names in _OP_BYTES.items():
        for name in names:
            values = [getattr(op, name) for op in by_tag.get(tag, ())]
            if values and (min(values) < 0 or max(values) > bounds.memory_bytes):
                check_bytes(next(v for v in values if _outside(v, 0, bounds.memory_bytes)), f"a {tag} op's {name}",
                            bounds)
    for tag, names in _OP_COUNTS.items():
        for name in names:
            check_counts([getattr(op, name) for op in by_tag.get(tag, ())], f"a {tag} op's {name}",
                         bounds.memory_bytes)


# ---- metadata and the end record ---------------------------------------------------------------------------------
def check_meta_figures(meta: dict) -> None:
    """The memory figures a session's bounds come from: each, where recorded, in [0, ``MAX_MEMORY_BYTES``]."""
    widest = FigureBounds()
    for block, keys in (("host_memory", ("ram_bytes", "swap_bytes")),
                        ("device_limits", ("memory_bytes", "max_buffer_bytes"))):
        for key in keys:
            value = meta.get(block, {}).get(key) if isinstance(meta.get(block), dict) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                check_bytes(value, f"metadata {block}.{key}", widest)
    distributed = meta.get("distributed")
    if not isinstance(distributed, dict):
        return
    for block, key in (("device_memory", "bytes"), ("shard", "kv_bytes_per_token")):  # a rank's header line
        value = distributed[block].get(key) if isinstance(distributed.get(block), dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            check_bytes(value, f"metadata distributed.{block}.{key}", widest)
    shard = distributed.get("shard")
    if isinstance(shard, dict):
        heads = [n for n in (*(shard.get("kv_heads") or ()), shard.get("n_kv_heads_total"))
                 if isinstance(n, int) and not isinstance(n, bool)]
        check_counts(heads, "metadata distributed.shard's head count", MAX_COUNT)


