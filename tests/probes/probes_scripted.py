"""A real ``PagedKVPool`` driven by scripted traffic under ``WorkerProbes``: the recorded session plus the live
snapshots taken at known instants (the ground truth for seek/rebuild and what-if tests)."""

from __future__ import annotations

import time

import mlx.core as mx

from pool import PagedKVPool, PoolConfig, ShrinkPolicy
from probes.events import Shrunk, Step
from probes.live import WorkerProbes
from probes.synthetic import ScriptedTraffic

N_KV_HEADS, HEAD_DIM = 1, 4


def record_scripted(path, design: str = "slab", slab_blocks: int = 4, block_size: int = 4, steps: int = 60,
                    seed: int = 0, num_layers: int = 2, shrink: ShrinkPolicy | None = None, open_blocks: str = "low"):
    """Run ``steps`` scripted steps, each ending with a shrink point (``shrink``: the pool's policy, default off);
    returns (probes, pool, live) where live = [(t_relative, snapshot, where)] taken right after ticks
    (where="tick") and between ops (where="mid": during a step, after some writes). Starts from an empty MLX
    buffer cache (as every pool test does, tests/pool/conftest.py): the copy meter charges the slack of a transient
    served from a larger cached buffer, so a cache left by whatever ran before in this process would show up as
    bytes copied."""
    mx.clear_cache()
    pool = PagedKVPool(PoolConfig(num_layers=num_layers, block_size=block_size, slab_blocks=slab_blocks,
                                  design=design, shrink=shrink or ShrinkPolicy(), open_blocks=open_blocks))
    probes = WorkerProbes(None, sample_hz=100.0, snapshot_hz=1e6, record_path=path, keyframe_interval_s=1e9,
                          meta={"scenario": "scripted", "backend": design, "model": "none"})
    probes.keyframe_max_ops = 40
    live: list[tuple[float, dict]] = []

    def write(seq, start, n):
        data = mx.arange(start, start + n, dtype=mx.float32)
        kv = (mx.broadcast_to(data[:, None, None], (n, N_KV_HEADS, HEAD_DIM)) + seq)[None]
        slots = pool.write_slots([seq], [start], n)
        for layer in range(num_layers):
            pool.write(layer, slots, kv, kv + 0.5)
        if seq % 3 == 0:  # a mid-step instant, between ops
            live.append((time.monotonic() - probes._t_start, pool.snapshot(), "mid"))

    probes.attach_pool(pool)
    probes.start()
    traffic = ScriptedTraffic(pool, seed=seed, write=write, max_live=5, prefill=(3, 17))
    tokens = 0
    for step in range(1, steps + 1):
        traffic.step()
        report = pool.shrink()
        if report.did_something:  # as the workload's shrink points report it (app/workloads/shrink_points.py)
            probes.emit(Shrunk(report=report))
        for seq in traffic.live:
            for layer in range(num_layers):
                pool.gather_visible(layer, seq)
        pool.fused_decision(dtype="float32", head_dim=HEAD_DIM, batch_size=len(traffic.live))
        tokens += len(traffic.live)
        probes.emit(Step(phase="decode", type="decode", batch=len(traffic.live), num_tokens=len(traffic.live),
                         wall_s=0.0))
        probes.tick(step, tokens)
        live.append((time.monotonic() - probes._t_start, pool.snapshot(), "tick"))
        pool.check_integrity()
    probes.stop({"steps": steps})
    return probes, pool, live
