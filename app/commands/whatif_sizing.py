"""The sizing half of ``slabscope whatif``: the modelled peak footprint, the memory-fit table and the limit flags,
computed by ``probes.sizing`` and printed with what is measured and what is modelled."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pool.units import format_bytes, mib
from probes.sizing import FitRow, FootprintModel, PoolTimeline
from probes.whatif import config_figures

@dataclass
class Sizing:
    timeline: PoolTimeline
    model: FootprintModel
    rows: list[FitRow]
    max_buffer: int | None
    max_buffer_source: str
    flags: list[str]

    def to_json(self) -> dict:
        t = self.timeline
        return {"recorded_config": config_figures(t.base), "whatif_config": config_figures(t.cfg),
                "bytes_per_row": t.bytes_per_row,
                "recorded_max_context": t.max_context, "recorded_max_batch": t.max_batch,
                "footprint": {**asdict(self.model), "recorded_peak_is": "measured", "whatif_peak_is": "model"},
                "fit": [asdict(row) for row in self.rows], "max_buffer_bytes": self.max_buffer,
                "max_buffer_source": self.max_buffer_source, "limit_flags": self.flags}


def sizing(session, args) -> Sizing:
    from probes.sizing import (GIB as _GIB, PRESETS_GIB, buffer_flags, fit_table, footprint_model, pool_timeline,
                               recorded_max_buffer)

    timeline = pool_timeline(session, slab_blocks=args.slab_blocks, block_size=args.block_size, design=args.design,
                             shrink=args.shrink, shrink_budget=args.shrink_budget)
    model = footprint_model(session, timeline)
    if args.max_buffer is not None:
        max_buffer, source = args.max_buffer, "--max-buffer"
    else:
        max_buffer = recorded_max_buffer(session.meta)
        source = "the recording device's" if max_buffer is not None else "not recorded for this device (--max-buffer)"
    memories = args.memory or [size * _GIB for size in PRESETS_GIB]
    rows = fit_table(model, timeline, memories, max_buffer)
    flags = buffer_flags(timeline, timeline.whatif_peak_capacity, max_buffer, "at the what-if peak")
    for row in rows:
        largest = max(row.largest_batch * -(-timeline.max_context // timeline.cfg.block_size), 0)
        from pool.config import capacity_for

        capacity = capacity_for(timeline.cfg.design, timeline.cfg.slab_blocks, largest)
        flags += buffer_flags(timeline, capacity, None, f"at the largest batch for {_size(row.memory)}")
    return Sizing(timeline, model, rows, max_buffer, source, list(dict.fromkeys(flags)))


def _size(nbytes: int) -> str:
    return format_bytes(nbytes)


def _mib(nbytes: int) -> str:
    return f"{mib(nbytes)} MiB"


def print_sizing(s: Sizing) -> None:
    from probes.sizing import tensor_figures

    t, m = s.timeline, s.model
    cfg = t.cfg
    geometry = f"{cfg.design}, block {cfg.block_size}, slab {cfg.slab_blocks}"
    print(f"\nsizing ({geometry}):")
    print(f"  peak footprint, recorded (measured): {_mib(m.recorded_peak)}")
    print(f"  peak footprint, what-if (model: measured footprint + replayed pool difference): {_mib(m.whatif_peak)}"
          f" at t={m.whatif_peak_t:.2f} s, pool reserved then {_mib(m.pool_at_peak)} (replayed)")
    outside = " + RSS outside MLX (unified memory)" if m.unified else ""
    print(f"  non-pool memory (measured: peak of footprint - pool reserved{outside}): {_mib(m.nonpool_peak)}")
    per_token = t.bytes_per_row / cfg.block_size * cfg.num_layers
    print(f"  per sequence: {per_token / 1024:,.1f} KiB of K+V per token over {cfg.num_layers} layers "
          f"({t.geometry.dtype}, {t.geometry.n_kv_heads} KV heads x {t.geometry.head_dim}); recorded: up to "
          f"{t.max_batch} sequences, {t.max_context} tokens")
    if cfg.design == "monolithic" and t.base.design != "monolithic":
        print("  not modelled: grow-by-copy's transient old+new tensors and the freed buffers MLX keeps cached on "
              "a GPU (a lower bound)")
    from probes.tables import Column, render_table

    head = ("memory", "fits? (what-if peak)", "headroom", f"largest batch @ {t.max_context} tok",
            f"largest context @ {t.max_batch} seq")
    body = [(_size(r.memory), "yes" if r.fits else "no", _mib(r.headroom), f"{r.largest_batch:,}",
             f"{r.largest_context:,}") for r in s.rows]
    print(render_table([Column(h, right=True) for h in head], body, indent=2))
    print("  (model: non-pool memory as recorded, activations at the recorded batch; the pool must also pass the "
          "largest-buffer and MLX shape checks of pool/limits.py; the model's own position limit applies too)")
    for why in dict.fromkeys(r.why_not for r in s.rows if r.why_not and not r.why_not.startswith("the modelled")):
        print(f"  does not fit at any size: {why}")
    for row in s.rows[-1:]:
        if row.batch_limit:
            print(f"  one more sequence at {_size(row.memory)}: {row.batch_limit}")
    elements, nbytes = tensor_figures(t, t.whatif_peak_capacity)
    buffer = format_max_buffer(s)
    print(f"limits: largest K/V tensor at the what-if peak: {elements:,} elements, {_mib(nbytes)} (32-bit index "
          f"range: {2**32 - 1:,} elements; largest buffer: {buffer})")
    for flag in s.flags:
        print(f"  FLAG {flag}")
    if not s.flags:
        print("  no slab or pool buffer passes 2^32 elements or the largest buffer")


def format_max_buffer(s: Sizing) -> str:
    return f"{_mib(s.max_buffer)}, {s.max_buffer_source}" if s.max_buffer is not None else s.max_buffer_source
