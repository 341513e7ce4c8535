"""Scripted pool traffic and synthetic sessions (mlx-free): for tests and the open-time benchmark.

``ScriptedTraffic`` drives anything with the pool's sequence API (a ``PagedKVPool`` or a bare ``pool.BlockBook``)
through a deterministic serving-like mix: admit sequences with a prefill, decode tokens, fork (clone), park and
resume prefixes (detach/adopt), trim, finish (release). ``write_synthetic_session`` writes a long session with
fake time through the real recorder: samples at ``sample_hz``, snapshots at ``snapshot_hz``, keyframes with the
bookkeeping state, and the op log of a real BlockBook, so readers are benchmarked on realistic files.
"""

from __future__ import annotations

import random
from typing import Callable

import msgspec

from pool import PoolConfig
from probes.events import OpBatch, Sample, SnapshotTaken, Step
from probes.recording import SessionRecorder


class ScriptedTraffic:
    """Deterministic traffic on ``target`` (reads it through ``step_view``, which both offer). ``write(seq_id,
    start, num_tokens)`` is called after every
    ``prepare_write`` (tests write real K/V there); ``max_live`` bounds concurrent sequences."""

    def __init__(self, target, seed: int = 0, write: Callable[[int, int, int], None] | None = None,
                 max_live: int = 6, prefill: tuple[int, int] = (5, 40)) -> None:
        self.target = target
        self.rng = random.Random(seed)
        self.write = write or (lambda seq, start, n: None)
        self.max_live = max_live
        self.prefill = prefill
        self.next_seq = 0
        self.live: list[int] = []
        self.handles: list = []

    def _append(self, seq: int, num_tokens: int) -> None:
        start = self._view(seq).lengths[0]
        self.target.prepare_write(seq, start, num_tokens)
        self.write(seq, start, num_tokens)

    def _view(self, seq: int):
        return self.target.step_view([seq])

    def _admit(self) -> None:
        seq = self.next_seq
        self.next_seq += 1
        if self.handles and self.rng.random() < 0.5:
            self.target.adopt(self.rng.choice(self.handles), seq)
        else:
            self.target.add_sequence(seq)
        self._append(seq, self.rng.randint(*self.prefill))
        self.live.append(seq)

    def step(self) -> None:
        """One scheduler step: maybe admit/fork/park/finish/trim, then decode one token for every live seq."""
        rng = self.rng
        if len(self.live) < self.max_live and rng.random() < 0.4:
            self._admit()
        roll = rng.random()
        if self.live and roll < 0.08:
            src = rng.choice(self.live)
            dst = self.next_seq
            self.next_seq += 1
            self.target.clone(src, dst, rng.randint(0, self._view(src).lengths[0]))
            self.live.append(dst)
        elif self.live and roll < 0.14:
            seq = self.live.pop(rng.randrange(len(self.live)))
            self.handles.append(self.target.detach(seq))
        elif self.live and roll < 0.30:
            self.target.release(self.live.pop(rng.randrange(len(self.live))))
        elif self.live and roll < 0.36:
            self._trim(rng.choice(self.live))
        if len(self.handles) > 3:
            self.target.release_handle(self.handles.pop(0))
        for seq in list(self.live):
            self._append(seq, 1)

    def _trim(self, seq: int) -> None:
        view = self._view(seq)
        block_size, length, start = view.block_size, view.lengths[0], view.logical_starts[0]
        keep = (length // 2) // block_size * block_size
        if keep >= start:
            self.target.trim(seq, keep)


def write_synthetic_session(path, seconds: float = 3600.0, sample_hz: float = 10.0, snapshot_hz: float = 2.0,
                            steps_per_s: float = 10.0, num_layers: int = 4, keyframe_interval_s: float = 10.0,
                            seed: int = 0, file_flush_s: float = 0.5) -> dict:
    """Write a session of ``seconds`` of fake time; returns counts of what was written. No mlx needed."""
    from pool import BlockBook, build_snapshot
    from probes.rebuild import modelled_observed

    book = BlockBook(num_layers, 16, "slab", 32, None)
    ops: list = []
    book.add_op_listener(ops.append)
    book.set_geometry("float32", 2, 64, 2 * 2 * 64 * 16 * 4)
    traffic = ScriptedTraffic(book, seed=seed, max_live=8, prefill=(16, 400))
    geometry = PoolConfig(num_layers, 16, 32, "slab")
    meta = {"scenario": "synthetic-hour", "backend": "slab", "model": "none", "sample_hz": sample_hz,
            "snapshot_hz": snapshot_hz, "geometry": msgspec.to_builtins(geometry)}
    rec = SessionRecorder(path, meta, 0.0)
    counts = {"samples": 0, "snapshots": 0, "steps": 0}
    tick = 1.0 / sample_hz
    next_snap, next_key, next_step, step = 0.0, 0.0, 0.0, 0
    batch: list = [OpBatch(t=0.0, ops=list(ops), op_t=[0.0] * len(ops))]  # storage_init, before any step
    per_write = max(1, int(round(sample_hz * file_flush_s)))  # what WorkerProbes writes per file flush
    for k in range(int(seconds * sample_hz)):
        t = k * tick
        while next_step <= t:
            ops.clear()
            traffic.step()
            step += 1
            batch.append(OpBatch(t=next_step, ops=list(ops), op_t=[next_step] * len(ops)))
            batch.append(Step(t=next_step, step=step, tokens=step * 8, phase="decode", type="decode",
                              batch=len(traffic.live), num_tokens=len(traffic.live), wall_s=0.09))
            next_step += 1.0 / steps_per_s
        batch.append(_sample(t, step, 300_000_000 + 1000 * len(book.blocks)))
        if t >= next_snap:
            keyframe = t >= next_key
            batch.append(SnapshotTaken(t=t, step=step, tokens=step * 8, keyframe=keyframe,
                                       snapshot=build_snapshot(book, modelled_observed(book)),
                                       book_state=book.state() if keyframe else None))
            next_key += keyframe_interval_s if keyframe else 0.0
            next_snap += 1.0 / snapshot_hz
            counts["snapshots"] += 1
        counts["samples"] += 1
        if counts["samples"] % per_write == 0:
            rec.write(batch)
            batch = []
    rec.write(batch)
    counts["steps"] = step
    counts["ops"] = rec.num_ops
    counts["keyframes"] = rec.num_keyframes
    rec.close({"synthetic": True}, t=seconds)
    counts["bytes"] = rec.bytes_written
    return counts


def _sample(t: float, step: int, footprint: int) -> Sample:
    return Sample(t=t, step=step, tokens=step * 8, active=footprint - 10**6, cache=10**6, footprint=footprint,
                  peak=footprint, footprint_max=footprint, rss=footprint + 50 * 10**6, rss_max=footprint + 50 * 10**6,
                  sys_available=10**10, weights=0, pool_live=0, pool_free=0, other_active=footprint - 10**6,
                  rss_other=50 * 10**6, cost_us=60.0)
