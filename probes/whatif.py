"""What-if replay: re-run a session's op log through the pool bookkeeping alone with another geometry (mlx-free).

"What would this workload have cost with 64-block slabs / 16-token blocks / the monolithic design?" The recorded
sequence-level ops (add/prepare_write/release/clone/detach/adopt/trim/...) are re-executed on a fresh
``pool.BlockBook`` built with the requested geometry; the derived ops are recomputed by the book itself. At every
instant where the recording took a pool snapshot the replay measures slab count, reserved bytes, live blocks and
fragmentation (layer 0; layers move in lockstep); at every decode step (``DecodeSteps``) it measures the gather runs
of the step's sequences, and after every op the slabs held: the figures ``probes.figures`` defines, so the
recorded geometry's replay prints what ``compare`` and the TUI print.

With the recorded geometry the replay must reproduce the recording exactly: ``mismatches_with_recording`` lists
every figure that differs, the recorded decode steps' gather runs included (the tests, and the last line
``slabscope whatif`` prints, rely on it).

Copied bytes here are the bookkeeping's *model* (``bytes_copied_model``: old rows x bytes per row per monolithic
growth; the slab design copies nothing): a replay has no storage to measure. The recording's measured figure
(``bytes_copied``, from the allocator) is not replayed.

Shrink (pool/shrink_types.py): the recorded ``shrink`` points (one per workload step and idle tick, logged whatever
the policy) re-run the replay's own shrink policy, ``--shrink off|release|compact`` (the recorded one by default:
then releases and moves reproduce the recording exactly). Moved bytes are the model (``bytes_moved_model``).
A recording made before shrink existed has no shrink points: any policy then replays as ``off``.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

import msgspec

from pool import BlockBook, PoolConfig, PoolError, apply_op
from pool.errors import BudgetExceeded
from pool.config import chunk_rows
from pool.gather_runs import table_runs, visible_rows
from pool.ops import DerivedOp, PrepareWrite, SetSlabBlocks, ShrinkTick, StorageInit, Trim
from pool.snapshot import free_figures
from probes import limits
from probes.errors import ReplayError
from probes.events import GatherRuns, Step

CHECKED_STATS = ("allocated_blocks", "live_blocks", "free_blocks", "bytes_reserved", "bytes_in_use",
                 "num_sequences", "num_handles")
CHECKED_COUNTERS = ("slab_appends", "grow_events", "bytes_copied_model", "cow_copies", "rows_minted",
                    "rows_reused", "slab_releases", "bytes_released", "blocks_moved", "bytes_moved_model")
CHECKED_LAYER0 = ("num_slabs", "capacity_rows", "free_rows", "holes", "largest_free_run", "fragmentation")


@dataclass
class WhatIfPoint:
    """The replayed pool at one recorded snapshot instant."""

    t: float
    op_index: int
    stats: dict
    counters: dict
    layer0: dict


@dataclass
class WhatIfResult:
    config: PoolConfig
    recorded_config: PoolConfig
    points: list[WhatIfPoint] = field(default_factory=list)
    ops_replayed: int = 0
    skipped: list[str] = field(default_factory=list)  # ops the new geometry cannot execute, with the reason
    shrink_points: int = 0  # ``shrink`` ops replayed (where the policy ran; none in recordings made before shrink)
    decode_steps: list["DecodeStep"] = field(default_factory=list)  # every decode step's gather runs, replayed
    max_slabs: int = 0  # the most slabs (all layers) the replayed pool held, after any op

    def summary(self) -> dict:
        """Headline figures over the whole replay (gather runs and slabs as ``probes.figures`` defines them)."""
        pts = self.points
        hist = Counter(runs for step in self.decode_steps for runs in step.runs)
        pairs = sum(hist.values())
        last = pts[-1] if pts else None
        return {
            "config": config_figures(self.config),
            "ops_replayed": self.ops_replayed,
            "ops_skipped": len(self.skipped),
            "max_slabs": self.max_slabs,
            "final_slabs": last.layer0["num_slabs"] * self.config.num_layers if last else 0,
            "max_slabs_per_layer": max((p.layer0["num_slabs"] for p in pts), default=0),
            "final_slabs_per_layer": last.layer0["num_slabs"] if last else 0,
            "peak_bytes_reserved": max((p.stats["bytes_reserved"] for p in pts), default=0),
            "final_bytes_reserved": last.stats["bytes_reserved"] if last else 0,
            "peak_bytes_in_use": max((p.stats["bytes_in_use"] for p in pts), default=0),
            "max_fragmentation": max((p.layer0["fragmentation"] for p in pts), default=0.0),
            "mean_fragmentation": sum(p.layer0["fragmentation"] for p in pts) / len(pts) if pts else 0.0,
            "decode_steps": len(self.decode_steps),
            "mean_gather_runs": sum(r * n for r, n in hist.items()) / pairs if pairs else None,
            "max_gather_runs": max(hist, default=None),
            "gather_runs_hist": {str(k): v for k, v in sorted(hist.items())},
            "slab_appends": last.counters["slab_appends"] if last else 0,
            "grow_events": last.counters["grow_events"] if last else 0,
            "bytes_copied_model": last.counters["bytes_copied_model"] if last else 0,
            "shrink_points": self.shrink_points,
            "slab_releases": last.counters["slab_releases"] if last else 0,
            "bytes_released": last.counters["bytes_released"] if last else 0,
            "blocks_moved": last.counters["blocks_moved"] if last else 0,
            "bytes_moved_model": last.counters["bytes_moved_model"] if last else 0,
        }


@dataclass
class DecodeStep:
    """One decode step found in the op log: its sequences, the same-slab runs each one's attention walks in the
    replayed pool (one block table per sequence, shared by every layer), and the time of its last write."""

    t: float
    seqs: list[int]
    runs: list[int]


class DecodeSteps:
    """Finds the decode steps in an op log as it is replayed and measures their gather runs.

    A decode step prepares one token for each sequence of its batch, one ``prepare_write`` of 1 token per sequence
    in a row (derived ops between them), before any other sequence-level op: such a group is a decode step, measured
    once its last write is applied (what the step's attention then reads). A prefill chunk of one token looks the
    same; the recorded ``Step`` events tell them apart: the first step recorded after the group is that chunk's own
    (a prefill step of one token), whereas a decode group is followed by a decode step (its own, or with pipelined
    decoding the one before it)."""

    def __init__(self, steps: list) -> None:
        self.found: list[DecodeStep] = []
        self._steps = steps
        self._group: list[int] = []
        self._t = 0.0

    def before(self, entry, book) -> None:
        """Called before ``entry`` is applied: a sequence-level op that does not extend the group closes it."""
        op = entry.op
        if isinstance(op, DerivedOp):
            return
        if isinstance(op, PrepareWrite) and op.num_tokens == 1 and op.seq not in self._group:
            return
        self.close(book)

    def after(self, entry) -> None:
        op = entry.op
        if isinstance(op, PrepareWrite) and op.num_tokens == 1:
            self._group.append(op.seq)
            self._t = entry.t

    def close(self, book) -> None:
        """Measure the open group (unless it is a one-token prefill chunk) and start a new one."""
        group, self._group = self._group, []
        if not group or self._prefill_chunk(group):
            return
        self.found.append(DecodeStep(self._t, group, [_seq_runs(book, seq) for seq in group]))

    def _prefill_chunk(self, group: list[int]) -> bool:
        index = bisect.bisect_left(self._steps, self._t, key=lambda step: step.t)
        after = self._steps[index] if index < len(self._steps) else None
        return after is not None and after.type == "prefill" and after.num_tokens == len(group)


def _seq_runs(book, seq_id: int) -> int:
    table = book.table(seq_id)
    visible = visible_rows(table.rows, table.logical_start, table.length, book.block_size)
    return table_runs(visible, book.design, book.slab_blocks)


def config_figures(config: PoolConfig) -> dict:
    """A pool configuration as the flat figures ``slabscope whatif`` prints (its shrink policy spelled out)."""
    return {"num_layers": config.num_layers, "block_size": config.block_size, "slab_blocks": config.slab_blocks,
            "design": config.design, "shrink": config.shrink.mode, "shrink_budget": config.shrink.budget_bytes,
            "shrink_max_fill": config.shrink.max_fill, "open_blocks": config.open_blocks}


def recorded_config(view) -> PoolConfig:
    """The pool configuration the session ran with (``SessionModel.geometry``: the metadata, else the first
    snapshot)."""
    geometry = view.geometry
    if geometry is None:
        backend = view.meta.get("backend")
        if backend in ("slab", "monolithic"):
            raise ReplayError(f"the recording of this {backend} pool ends before it recorded the pool's geometry "
                              "(a v1 file cut before its first snapshot): nothing to replay")
        raise ReplayError(f"session has no pool (backend {backend or 'unknown'}): nothing to replay")
    return geometry


def replay_config(view, *, slab_blocks: int | None = None, block_size: int | None = None,
                  design: str | None = None, shrink: str | None = None,
                  shrink_budget: int | None = None) -> tuple[PoolConfig, PoolConfig]:
    """(recorded configuration, what-if configuration): the recorded one with the given overrides (None keeps a
    value). ``shrink``/``shrink_budget``: the shrink policy run at the recorded shrink points
    (pool/shrink_types.py)."""
    base = recorded_config(view)
    policy = base.shrink
    if shrink is not None:
        policy = msgspec.structs.replace(policy, mode=shrink)
    if shrink_budget is not None:
        policy = msgspec.structs.replace(policy, budget_bytes=shrink_budget)
    changes = {name: value for name, value in (("slab_blocks", slab_blocks), ("block_size", block_size),
                                                ("design", design)) if value is not None}
    return base, base.replace(shrink=policy, **changes)


class Replay:
    """A fresh ``BlockBook`` of configuration ``cfg`` re-executing a session's op log one op at a time (``step``),
    adapting what the configuration changes; ``result`` collects the ops it cannot execute."""

    def __init__(self, cfg: PoolConfig, base: PoolConfig) -> None:
        try:  # bounded like any replay: an op asking for more rows than a reader holds is an error, not a hang
            cfg.validate()
            self.bookkeeping = BlockBook.from_config(cfg, max_blocks_per_layer=limits.rows_per_layer(cfg.num_layers))
        except PoolError as exc:
            raise ReplayError(str(exc)) from None
        self.cfg, self.base = cfg, base
        self.handles: dict = {}
        self.result = WhatIfResult(config=cfg, recorded_config=base)

    def step(self, entry) -> None:
        _replay_one(self.bookkeeping, entry, self.handles, self.cfg, self.base, self.result)

    def reserved_bytes(self) -> int:
        """K+V bytes of the capacity reserved now (rows x the replay's bytes per row)."""
        book = self.bookkeeping
        return book.capacity * book.num_layers * book.bytes_per_row


def run_whatif(view, *, slab_blocks: int | None = None, block_size: int | None = None,
               design: str | None = None, shrink: str | None = None, shrink_budget: int | None = None) -> WhatIfResult:
    """Replay ``view``'s op log (a ``SessionModel``: a recording or a live run) with the given overrides; None keeps
    the recorded value. ``shrink``/``shrink_budget``: the shrink policy run at the recorded shrink points."""
    base, cfg = replay_config(view, slab_blocks=slab_blocks, block_size=block_size, design=design, shrink=shrink,
                              shrink_budget=shrink_budget)
    replay = Replay(cfg, base)
    result = replay.result
    steps = DecodeSteps(view.events_of(Step))
    book = replay.bookkeeping
    per_slab = chunk_rows(book.design, book.slab_blocks)
    marks = [(s.op_index, s.t) for s in view.snapshots]
    mark = 0
    for entry in view.all_ops():
        while mark < len(marks) and marks[mark][0] <= entry.i:
            result.points.append(_measure(book, marks[mark]))
            mark += 1
        steps.before(entry, book)
        replay.step(entry)
        steps.after(entry)
        result.max_slabs = max(result.max_slabs, book.capacity * book.num_layers // per_slab)
    steps.close(book)
    for op_index, t in marks[mark:]:
        result.points.append(_measure(book, (op_index, t)))
    result.decode_steps = steps.found
    return result


def _replay_one(book, entry, handles: dict, cfg: PoolConfig, base: PoolConfig, result: WhatIfResult) -> None:
    """Apply one op, adapting what the new geometry changes; record ops it cannot execute."""
    match entry.op:
        case SetSlabBlocks() if cfg.slab_blocks != base.slab_blocks:
            return  # the what-if fixes its own slab size
        case StorageInit(dtype=dtype, n_kv_heads=heads, head_dim=dim, bytes_per_row=bpr) if book.geometry is None:
            book.set_geometry(dtype, heads, dim, int(bpr * cfg.block_size / base.block_size))
            return
    try:
        if apply_op(book, entry.op, handles):
            result.ops_replayed += 1
            result.shrink_points += isinstance(entry.op, ShrinkTick)
    except BudgetExceeded:
        raise ReplayError(f"op {entry.i} ({entry.op.name}) would hold more than {book.max_blocks_per_layer:,} blocks "
                          "per layer, the most a replay holds (SLABSCOPE_MAX_REPLAY_ROWS)") from None
    except PoolError as exc:
        if isinstance(entry.op, Trim):  # a trim aligned to the recorded block size may not align to the new one
            result.skipped.append(f"op {entry.i}: {exc}")
            return
        raise ReplayError(f"op {entry.i} ({entry.op.name}) cannot be replayed with {config_figures(cfg)}: "
                          f"{exc}") from None


def _measure(book, mark: tuple[int, float]) -> WhatIfPoint:
    op_index, t = mark
    capacity = book.capacity
    free, holes, largest, fragmentation = free_figures(book)
    layer0 = {"num_slabs": capacity // chunk_rows(book.design, book.slab_blocks), "capacity_rows": capacity,
              "free_rows": free, "holes": holes, "largest_free_run": largest, "fragmentation": fragmentation}
    counters = book.counters.to_dict()
    counters["bytes_copied_model"] = counters.pop("bytes_copied")  # the book's figures are models: named so
    counters["bytes_moved_model"] = counters.pop("bytes_moved")
    return WhatIfPoint(t, op_index, book.stats().to_dict(), counters, layer0)


def mismatches_with_recording(view, result: WhatIfResult) -> list[str]:
    """Every recorded snapshot figure the replay does not reproduce (empty list: exact)."""
    problems = []
    for point, recorded in zip(result.points, view.snapshots):
        snap = recorded.snapshot
        figures = (("stats", CHECKED_STATS, snap.stats.to_dict(), point.stats),
                   ("counters", CHECKED_COUNTERS, _recorded_counters(snap.counters), point.counters),
                   ("layers[0]", CHECKED_LAYER0, _layer0_figures(snap), point.layer0))
        for where, keys, recorded_values, replayed in figures:
            for key in keys:
                if recorded_values.get(key) != replayed[key]:
                    problems.append(f"t={point.t:.3f} {where}.{key}: recorded {recorded_values.get(key)}, "
                                    f"replayed {replayed[key]}")
    if len(result.points) != len(view.snapshots):
        problems.append(f"{len(view.snapshots)} recorded snapshots, {len(result.points)} replayed points")
    return problems + _decode_mismatches(view.events_of(GatherRuns), result.decode_steps)


def _decode_mismatches(recorded: list, replayed: list[DecodeStep]) -> list[str]:
    """Every recorded decode step (``GatherRuns``) whose gather runs the replay does not reproduce."""
    if not recorded:
        return []
    problems = []
    for number, (event, step) in enumerate(zip(recorded, replayed)):
        measured = dict(zip(event.seq_ids, event.runs_max))
        replay = dict(zip(step.seqs, step.runs))
        if measured != replay:
            problems.append(f"decode step {number} (t={event.t:.3f}) gather runs: recorded {measured}, "
                            f"replayed {replay}")
    if len(replayed) != len(recorded):
        problems.append(f"{len(recorded)} recorded decode steps, {len(replayed)} found in the op log")
    return problems


def _layer0_figures(snap) -> dict:
    if not snap.layers:
        return {}
    layer = snap.layers[0]
    return {"num_slabs": layer.num_chunks, "capacity_rows": layer.capacity_rows, "free_rows": layer.free_rows,
            "holes": layer.holes, "largest_free_run": layer.largest_free_run, "fragmentation": layer.fragmentation}


def _recorded_counters(counters) -> dict:
    """A recorded snapshot's counters; recordings made before copies were measured (``bytes_copied_model`` None)
    stored the modelled figure as ``bytes_copied``."""
    figures = counters.to_dict()
    if figures["bytes_copied_model"] is None:
        figures["bytes_copied_model"] = counters.bytes_copied
    return figures
