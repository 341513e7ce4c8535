"""Deterministic worker event streams for the TUI tests (typed ``probes.events`` records, as a worker sends them).

``SimPool`` is a tiny stand-in for the pool's bookkeeping: rows minted lowest-free-first in lockstep over every
layer, a shared prefix held by refcount, releases that free rows. It produces the typed snapshots and ops the real
pool emits, so views can be tested without the workloads or mlx. ``FakeWorker`` replays such a stream with the
WorkerHandle interface (start/poll/cancel/alive/error).
"""

from __future__ import annotations

import math

from pool import FusedDecision, LayerSnapshot, PoolCounters, PoolSnapshot, PoolStats
from pool.ops import AddSequence, CopyOnWrite, PrepareWrite, Release, RowsFreed
from pool.gather_runs import table_runs
from probes.events import (Done, FusedChange, GatherRuns, MetaUpdate, OpBatch, PhaseEdge, ProbeOverhead, ProbeStats,
                           Sample, SnapshotTaken, Step, WorkerError)

BLOCK = 4


class SimPool:
    """Plain-data pool model: per row owner and refcount, shared in lockstep by every layer."""

    def __init__(self, num_layers: int = 3, slab_blocks: int = 4, design: str = "slab") -> None:
        self.num_layers, self.slab_blocks, self.design = num_layers, slab_blocks, design
        self.owner: list[int] = []
        self.ref: list[int] = []
        self.seq_rows: dict[int, list[int]] = {}
        self.num_slabs = 0
        self.hist: dict[int, int] = {}

    def _mint(self, seq: int) -> int:
        for row, r in enumerate(self.ref):
            if r == 0:
                self.owner[row], self.ref[row] = seq, 1
                return row
        self.owner.append(seq)
        self.ref.append(1)
        self.num_slabs = max(self.num_slabs, math.ceil(len(self.owner) / self.slab_blocks))
        return len(self.owner) - 1

    def add(self, seq: int, blocks: int, share_from: int | None = None, shared: int = 0) -> list:
        rows = []
        if share_from is not None:
            for row in self.seq_rows[share_from][:shared]:
                self.ref[row] += 1
                rows.append(row)
        rows += [self._mint(seq) for _ in range(blocks - len(rows))]
        self.seq_rows[seq] = rows
        return [AddSequence(seq), PrepareWrite(seq, 0, blocks * BLOCK)]

    def grow(self, seq: int) -> list:
        self.seq_rows[seq].append(self._mint(seq))
        return [PrepareWrite(seq, (len(self.seq_rows[seq]) - 1) * BLOCK, BLOCK)]

    def release(self, seq: int) -> list:
        freed = []
        for row in self.seq_rows.pop(seq):
            self.ref[row] -= 1
            if self.ref[row] == 0:
                self.owner[row] = -1
                freed.append(row)
            elif self.owner[row] == seq:
                self.owner[row] = next(s for s, rows in self.seq_rows.items() if row in rows)
        return [RowsFreed(freed, len(freed) * self.num_layers), Release(seq)]

    def gather_all(self) -> None:
        for rows in self.seq_rows.values():
            runs = 1 + sum(1 for a, b in zip(rows, rows[1:]) if a // self.slab_blocks != b // self.slab_blocks)
            self.hist[runs] = self.hist.get(runs, 0) + 1  # per layer: one gather per sequence

    def snapshot(self) -> PoolSnapshot:
        capacity = self.num_slabs * self.slab_blocks
        owners = self.owner + [-1] * (capacity - len(self.owner))
        refs = self.ref + [0] * (capacity - len(self.ref))
        free = [r for r in range(capacity) if refs[r] == 0]
        runs, cur = [], 0
        for r in range(capacity):
            cur = cur + 1 if refs[r] == 0 else 0
            runs.append(cur)
        largest = max(runs, default=0)
        holes = sum(1 for r in range(capacity) if refs[r] == 0 and (r == 0 or refs[r - 1] != 0))
        live = sum(1 for r in refs if r > 0)
        layers = [LayerSnapshot(num_chunks=self.num_slabs, capacity_rows=capacity, free_rows=len(free), holes=holes,
                                largest_free_run=largest, fragmentation=0.0 if not free else 1 - largest / len(free),
                                gather_runs_hist=dict(self.hist),
                                fused=FusedDecision(False, "no GPU kernel backend (CPU)"))
                  for _ in range(self.num_layers)]
        return PoolSnapshot(
            design=self.design, block_size=BLOCK, slab_blocks=self.slab_blocks, num_layers=self.num_layers,
            dtype="float32", n_kv_heads=2, head_dim=8, bytes_per_row=1024,
            stats=PoolStats(allocated_blocks=live, live_blocks=live, free_blocks=len(free),
                            bytes_reserved=capacity * 1024 * self.num_layers,
                            bytes_in_use=live * 1024 * self.num_layers, num_sequences=len(self.seq_rows),
                            num_handles=0),
            counters=PoolCounters(slab_appends=self.num_slabs, cow_copies=1, rows_minted=len(self.owner),
                                  gather_decisions=self.num_layers),
            layers=layers, seq_rows={s: list(rows) for s, rows in self.seq_rows.items()}, row_owner=list(owners),
            row_refcount=list(refs))


def sample(t: float, step: int, tokens: int, active: float, cache: float = 2e6, rss: float | None = None,
           **accounting) -> Sample:
    """A sample with every field (accounting defaults: 30 MB weights, 5 MB pool live, 1 MB pool free)."""
    parts = dict(weights=30e6, pool_live=5e6, pool_free=1e6, other_active=active - 36e6, rss_other=28e6)
    parts.update(accounting)
    rss = active + 30e6 if rss is None else rss
    return Sample(t=t, step=step, tokens=tokens, active=int(active), cache=int(cache), footprint=int(active + cache),
                  peak=int(active), footprint_max=int(active + cache), rss=int(rss), rss_max=int(rss),
                  sys_available=8_000_000_000, cost_us=100.0, **{k: int(v) for k, v in parts.items()})


def event_stream(backend: str = "slab", steps: int = 24, t0: float = 1000.0, num_layers: int = 3) -> list:
    """A full run: meta, phases, steps, samples, snapshots, ops, fused events, done. Sequences 1-3 arrive (2 shares
    1's first block), grow, 1 and 3 finish early so rows are freed and reused by 4."""
    pool = SimPool(num_layers=num_layers) if backend != "dense" else None
    meta = {"t_start": t0, "backend": backend, "scenario": "churn", "model": "synthetic:tiny", "session_id": "sim"}
    if pool is not None:
        meta["geometry"] = {"num_layers": num_layers, "block_size": BLOCK, "slab_blocks": pool.slab_blocks,
                            "design": backend}
    ev: list = [MetaUpdate(t=t0, meta=meta)]
    t, tokens, step = t0, 0, 0
    ev.append(PhaseEdge(t=t, step=step, tokens=tokens, name="burst", edge="start"))
    for step in range(1, steps + 1):
        t = t0 + step * 0.5
        ops: list = []
        if pool is not None:
            if step == 1:
                ops += pool.add(1, 3) + pool.add(2, 3, share_from=1, shared=1) + pool.add(3, 2)
                ops.append(CopyOnWrite(seq=2, logical_block=1, num_layers=num_layers))
            elif step in (8, 12):
                ops += pool.release(1 if step == 8 else 3)
            elif step == 13:
                ops += pool.add(4, 3)
            elif step % 3 == 0:
                ops += pool.grow(2)
            pool.gather_all()
        kind = "prefill" if step in (1, 13) else "decode"
        tokens += 24 if kind == "prefill" else 3
        stamp = dict(t=t, step=step, tokens=tokens)
        ev.append(Step(**stamp, phase="burst", type=kind, batch=3, num_tokens=24 if kind == "prefill" else 3,
                       wall_s=0.05))
        if ops:
            ev.append(OpBatch(**stamp, ops=ops, op_t=[t] * len(ops)))
        base = 50e6 if backend == "dense" else 40e6
        ev.append(sample(t, step, tokens, base + step * 1e6 + (8e6 if step == 12 else 0)))
        if pool is not None:
            ev.append(SnapshotTaken(**stamp, snapshot=pool.snapshot(), keyframe=step == 1))
            ev.append(FusedChange(**stamp, layer=step % num_layers, use_fused=step % 5 == 0,
                                  reason="fused" if step % 5 == 0 else "layer has more than one slab"))
            if kind == "decode":  # the step's gather runs, as the pool backend reports them after each decode step
                seqs = sorted(pool.seq_rows)
                runs = [table_runs(pool.seq_rows[seq], pool.design, pool.slab_blocks) for seq in seqs]
                ev.append(GatherRuns(**stamp, seq_ids=seqs, runs_layer0=runs, runs_max=runs))
        if step == steps // 2:
            ev.append(ProbeStats(**stamp, overhead=ProbeOverhead(cost_fraction=0.012)))
    ev.append(PhaseEdge(t=t, step=step, tokens=tokens, name="burst", edge="end"))
    ev.append(Done(t=t, step=step, tokens=tokens,
                   summary={"steps": steps, "probe_overhead": {"cost_fraction": 0.011}}))
    return ev


class FakeWorker:
    """WorkerHandle stand-in: hands out ``events`` a few at a time; optional crash after ``crash_after`` events."""

    def __init__(self, events: list, per_poll: int = 20, crash_after: int | None = None) -> None:
        self.events, self.per_poll, self.crash_after = list(events), per_poll, crash_after
        self.sent = 0
        self.started = self.cancelled = False
        self.error: str | None = None
        self.exitcode: int | None = None

    def start(self) -> "FakeWorker":
        self.started = True
        return self

    @property
    def alive(self) -> bool:
        return self.started and not self.cancelled and self.sent < len(self.events) and self.error is None

    def poll(self) -> list:
        if not self.alive:
            return []
        end = min(len(self.events), self.sent + self.per_poll)
        if self.crash_after is not None and end >= self.crash_after:
            batch = self.events[self.sent:self.crash_after]
            self.sent = self.crash_after
            self.error = "killed by signal 9 (likely out of memory)"
            return batch + [WorkerError(t=batch[-1].t if batch else 0.0, step=-1, tokens=-1, text=self.error,
                                        origin="parent")]
        batch = self.events[self.sent:end]
        self.sent = end
        return batch

    def cancel(self) -> None:
        self.cancelled = True


def big_stream(num_layers: int = 28, num_slabs: int = 64, slab_blocks: int = 32, steps: int = 6,
               t0: float = 500.0) -> list:
    """A pool the size the issue asks the UI to stay responsive with (28 layers x 64 slabs of 32 rows): 40
    sequences interleaved across every slab, some rows shared, a free hole every 5th row."""
    rows = num_slabs * slab_blocks
    owners = [-1 if r % 5 == 4 else (r // 3) % 40 for r in range(rows)]
    refs = [0 if o < 0 else (2 if r % 17 == 0 else 1) for r, o in enumerate(owners)]
    seq_rows: dict[int, list[int]] = {}
    for r, o in enumerate(owners):
        if o >= 0:
            seq_rows.setdefault(o, []).append(r)
    layer = LayerSnapshot(num_chunks=num_slabs, capacity_rows=rows, free_rows=owners.count(-1),
                          holes=owners.count(-1), largest_free_run=1,
                          fragmentation=1 - 1 / max(1, owners.count(-1)), gather_runs_hist={40: 12, 64: 3},
                          fused=FusedDecision(False, "layer has more than one slab"))
    snap = PoolSnapshot(design="slab", block_size=32, slab_blocks=slab_blocks, num_layers=num_layers,
                        dtype="bfloat16", n_kv_heads=8, head_dim=128, bytes_per_row=131072,
                        stats=PoolStats(allocated_blocks=rows, live_blocks=rows - owners.count(-1), free_blocks=0,
                                        bytes_reserved=rows * 131072 * num_layers, bytes_in_use=0, num_sequences=40,
                                        num_handles=0),
                        counters=PoolCounters(), layers=[layer] * num_layers, seq_rows=seq_rows, row_owner=owners,
                        row_refcount=refs)
    meta = {"t_start": t0, "backend": "slab", "session_id": "big",
            "geometry": {"num_layers": num_layers, "block_size": 32, "slab_blocks": slab_blocks, "design": "slab"}}
    events: list = [MetaUpdate(t=t0, meta=meta)]
    for step in range(1, steps + 1):
        t = t0 + step * 0.5
        events.append(sample(t, step, step * 40, 4e9 + step * 1e8, cache=1e8, rss=5e9))
        events.append(SnapshotTaken(t=t, step=step, tokens=step * 40, snapshot=snap, keyframe=step == 1))
    events.append(Done(t=t0 + steps * 0.5, step=steps, tokens=steps * 40, summary={}))
    return events
