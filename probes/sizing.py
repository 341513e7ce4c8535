"""What-if sizing: the peak footprint under another pool geometry, whether a workload fits a memory size, the
largest batch and context that fit, and the hard limits a size would hit (mlx-free).

What is measured and what is modelled (every figure says which):

* **Measured**: the recording's samples: footprint (MLX active + cache), RSS, and so everything that is not the
  pool (weights, activations, MLX's buffer cache, host memory outside MLX).
* **Replayed exactly**: the pool's reserved bytes at every sample instant, under the recorded geometry and the
  what-if one, by re-executing the op log through the bookkeeping (``probes.whatif.Replay``; with the recorded
  geometry it reproduces the recording, ``mismatches_with_recording``).
* **Modelled**: the what-if footprint = measured footprint + (what-if pool bytes - recorded pool bytes) at each
  sample; its peak is the maximum over samples. Not modelled: how MLX's cache and the activations would differ
  (a monolithic pool's grow-by-copy transients and the freed buffers MLX keeps cached on a GPU come on top: on the
  H200 they made monolithic 4.5x the live KV).
* **Fit** (``fit_table``): non-pool memory = the recording's peak of (footprint - pool reserved), plus on unified
  memory (CPU, Apple silicon) the RSS MLX does not explain; a pool of B sequences x C tokens reserves
  ``capacity_for(B * ceil(C / block_size))`` rows per layer x bytes per row. It fits when the pool passes
  ``pool.limits.check_pool_capacity`` against the memory left (and the device's largest buffer, where known).
  Activations are taken as recorded: a larger batch or context needs more than this model says.
* **Limits** (``buffer_flags``): the largest K/V tensor against 2^32 elements (the fused kernel declines past it:
  ``pool.fused_decision`` rule 6) and the device's largest buffer (``pool.limits``: the arithmetic lives there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pool.config import PoolConfig, blocks_for_tokens, capacity_for
from pool.errors import SizeLimitError
from probes import figures
from pool.limits import (MemoryLimits, check_buffer, check_pool_capacity, elements_per_row, format_bytes,
                         index_range_problem, largest_buffer_elements, largest_buffer_rows)
from pool.ops import PrepareWrite
from probes.errors import ReplayError
from probes.meta import memory_model_of
from probes.whatif import Replay, replay_config

GIB = 2**30
PRESETS_GIB = (16, 32, 64, 128)
MAX_SEARCH = 2**31 - 1  # batch and context searched up to MLX's int32 shapes


@dataclass
class PoolTimeline:
    """Both replays sampled at every recorded memory sample, and what the workload asked of the pool."""

    t: list[float]
    recorded_reserved: list[int]
    whatif_reserved: list[int]
    whatif_peak_capacity: int        # rows per layer at the what-if replay's largest
    max_context: int                 # longest sequence (tokens) the recording wrote
    max_batch: int                   # most sequences live at once
    base: PoolConfig
    cfg: PoolConfig
    bytes_per_row: int               # K+V per row under the what-if geometry
    geometry: object                 # pool.config.LayerGeometry (dtype, heads, head_dim)
    skipped: list[str] = field(default_factory=list)


def pool_timeline(view, **overrides) -> PoolTimeline:
    """Replay the op log twice in one pass (recorded and what-if geometry), reading reserved bytes at every
    sample time. ReplayError when the session has no pool or never wrote K/V."""
    base, cfg = replay_config(view, **overrides)
    recorded, whatif = Replay(base, base), Replay(cfg, base)
    times = list(view.samples.window().t)
    rec_bytes, what_bytes = [], []
    peak_capacity = max_context = max_batch = 0
    ops = view.all_ops()
    i = 0
    for t in times:
        while i < len(ops) and ops[i].t <= t:
            entry = ops[i]
            recorded.step(entry)
            whatif.step(entry)
            if isinstance(entry.op, PrepareWrite):
                max_context = max(max_context, entry.op.start + entry.op.num_tokens)
                max_batch = max(max_batch, len(recorded.bookkeeping.seqs))
            i += 1
        peak_capacity = max(peak_capacity, whatif.bookkeeping.capacity)
        rec_bytes.append(recorded.reserved_bytes())
        what_bytes.append(whatif.reserved_bytes())
    for entry in ops[i:]:  # ops after the last sample still size the pool
        whatif.step(entry)
        peak_capacity = max(peak_capacity, whatif.bookkeeping.capacity)
    if whatif.bookkeeping.geometry is None:
        raise ReplayError("the session never wrote K/V into its pool: nothing to size")
    return PoolTimeline(times, rec_bytes, what_bytes, peak_capacity, max_context, max_batch, base, cfg,
                        whatif.bookkeeping.bytes_per_row, whatif.bookkeeping.geometry, whatif.result.skipped)


@dataclass
class FootprintModel:
    """Peaks over the recording's samples (bytes). ``recorded_peak`` is measured; ``whatif_peak`` is a model."""

    recorded_peak: int
    whatif_peak: int
    whatif_peak_t: float
    pool_at_peak: int          # what-if pool reserved at that instant (replayed)
    nonpool_peak: int          # measured: max over samples of the memory that is not the pool (see module doc)
    need_peak: int             # model: max over samples of the what-if footprint (+ RSS outside MLX on unified)
    unified: bool


def footprint_model(view, timeline: PoolTimeline) -> FootprintModel:
    """Peaks of the measured and the modelled footprint over the samples (module docstring)."""
    window = view.samples.window()
    if not len(window):
        raise ReplayError("the session has no memory samples: nothing to size")
    unified = memory_model_of(view.meta) == "unified"
    best = (-1, 0.0, 0)
    nonpool = need = 0
    for k, (t, footprint) in enumerate(zip(window.t, window.footprint)):
        modelled = footprint - timeline.recorded_reserved[k] + timeline.whatif_reserved[k]
        if modelled > best[0]:
            best = (modelled, t, timeline.whatif_reserved[k])
        outside = max(window.rss_other[k], 0) if unified else 0
        nonpool = max(nonpool, footprint - timeline.recorded_reserved[k] + outside)
        need = max(need, modelled + outside)
    return FootprintModel(int(figures.peak_footprint(view) or 0), best[0], best[1], best[2], nonpool, need, unified)


@dataclass
class FitRow:
    memory: int
    fits: bool                     # the recorded workload's modelled peak under the what-if geometry, allocatable
    headroom: int
    largest_batch: int             # sequences of max_context tokens
    largest_context: int           # tokens per sequence at max_batch sequences
    batch_limit: str               # why one more sequence does not fit
    context_limit: str
    why_not: str = ""              # why it does not fit ("" when it does): memory, or a buffer past the largest


def pool_problem(batch: int, context: int, timeline: PoolTimeline, room: int, max_buffer: int | None) -> str | None:
    """Why a pool of ``batch`` sequences x ``context`` tokens does not fit ``room`` bytes (None: it fits)."""
    cfg = timeline.cfg
    if room < 0:
        return f"the non-pool memory alone exceeds this size by {format_bytes(-room)}"
    rows = batch * blocks_for_tokens(context, cfg.block_size)
    capacity = capacity_for(cfg.design, cfg.slab_blocks, rows)
    limits = MemoryLimits(room, room if max_buffer is None else min(max_buffer, room), "what-if")
    try:
        check_pool_capacity(cfg.design, cfg.slab_blocks, [capacity] * cfg.num_layers,
                            timeline.bytes_per_row, limits)
    except SizeLimitError as exc:
        return str(exc)
    return None


def _largest(fits) -> tuple[int, str]:
    """Largest n in [0, MAX_SEARCH] with ``fits(n)`` None (monotone), and why n + 1 fails ("" at the bound)."""
    lo, hi = 0, 1
    while hi <= MAX_SEARCH and fits(hi) is None:
        lo, hi = hi, hi * 2
    hi = min(hi, MAX_SEARCH + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) is None else (lo, mid)
    return lo, (fits(hi) or "") if hi <= MAX_SEARCH else ""


def fit_table(model: FootprintModel, timeline: PoolTimeline, memories: list[int],
              max_buffer: int | None) -> list[FitRow]:
    """One row per memory size. The workload fits when its modelled peak fits the memory *and* the pool at the
    what-if peak can be allocated (no slab or tensor past ``max_buffer``): a "yes" beside a pool that cannot be
    allocated would contradict the limit flags printed under it."""
    unallocatable = peak_buffer_problem(timeline, max_buffer)
    rows = []
    for memory in memories:
        room = memory - model.nonpool_peak
        need = model.need_peak
        batch, why_batch = _largest(lambda b: pool_problem(b, timeline.max_context, timeline, room, max_buffer))
        context, why_context = _largest(lambda c: pool_problem(timeline.max_batch, c, timeline, room, max_buffer))
        why_not = (f"the modelled peak {format_bytes(need)} exceeds {format_bytes(memory)}" if need > memory
                   else unallocatable or "")
        rows.append(FitRow(memory, not why_not, memory - need, batch, context, why_batch, why_context, why_not))
    return rows


def peak_buffer_problem(timeline: PoolTimeline, max_buffer: int | None) -> str | None:
    """Why the pool at the what-if peak cannot be allocated on a device whose largest buffer is ``max_buffer``
    (None: it can, or the largest buffer is unknown)."""
    flags = buffer_flags(timeline, timeline.whatif_peak_capacity, max_buffer, "at the what-if peak")
    return next((flag for flag in flags if flag.endswith("cannot be allocated")), None)


def buffer_flags(timeline: PoolTimeline, capacity_rows: int, max_buffer: int | None, what: str) -> list[str]:
    """The hard limits the largest K/V tensor of a pool with ``capacity_rows`` rows per layer passes (empty: none)."""
    cfg, geometry = timeline.cfg, timeline.geometry
    elements = largest_buffer_elements(cfg.design, cfg.slab_blocks, [capacity_rows], cfg.block_size,
                                       geometry.n_kv_heads, geometry.head_dim)
    unit = "slab" if cfg.design == "slab" else "monolithic layer tensor"
    flags = []
    problem = index_range_problem(elements, f"{what}: one {unit} (K or V)")
    if problem:
        flags.append(problem + ": the fused kernel declines it (gather)")
    if max_buffer is not None:
        rows = largest_buffer_rows(cfg.design, cfg.slab_blocks, [capacity_rows])
        try:
            check_buffer(rows * timeline.bytes_per_row // 2, MemoryLimits(0, max_buffer, "the device's largest "
                                                                          "buffer"), f"{what}: one {unit}")
        except SizeLimitError as exc:
            flags.append(f"{exc}: it cannot be allocated")
    return flags


def tensor_figures(timeline: PoolTimeline, capacity_rows: int) -> tuple[int, int]:
    """(elements, bytes) of the largest K (or V) tensor of a pool with ``capacity_rows`` rows per layer."""
    cfg, geometry = timeline.cfg, timeline.geometry
    rows = largest_buffer_rows(cfg.design, cfg.slab_blocks, [capacity_rows])
    return rows * elements_per_row(cfg.block_size, geometry.n_kv_heads, geometry.head_dim), \
        rows * timeline.bytes_per_row // 2


def recorded_max_buffer(meta: dict) -> int | None:
    """The recording device's largest buffer (``meta["device_limits"]``), None when it was not recorded."""
    limits = meta.get("device_limits")
    if isinstance(limits, dict) and isinstance(limits.get("max_buffer_bytes"), int):
        return limits["max_buffer_bytes"]
    return None
