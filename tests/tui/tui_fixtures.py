"""Deterministic worker event streams for the TUI tests (docs/contracts.md §2 shapes, §1 snapshot schema).

``SimPool`` is a tiny stand-in for the pool's bookkeeping: rows minted lowest-free-first in lockstep over every
layer, a shared prefix held by refcount, releases that free rows. It produces exactly the snapshot and op shapes
the real pool emits, so views can be tested without the workloads or mlx. ``FakeWorker`` replays such a stream
with the WorkerHandle interface (start/poll/cancel/alive/error).
"""

from __future__ import annotations

import math

BLOCK = 4


class SimPool:
    """Plain-data pool model: per row owner and refcount, shared in lockstep by every layer."""

    def __init__(self, num_layers: int = 3, slab_blocks: int = 4, design: str = "slab") -> None:
        self.num_layers, self.slab_blocks, self.design = num_layers, slab_blocks, design
        self.owner: list[int] = []
        self.ref: list[int] = []
        self.seq_rows: dict[int, list[int]] = {}
        self.num_slabs = 0
        self.hist: dict[str, int] = {}

    def _mint(self, seq: int) -> int:
        for row, r in enumerate(self.ref):
            if r == 0:
                self.owner[row], self.ref[row] = seq, 1
                return row
        self.owner.append(seq)
        self.ref.append(1)
        self.num_slabs = max(self.num_slabs, math.ceil(len(self.owner) / self.slab_blocks))
        return len(self.owner) - 1

    def add(self, seq: int, blocks: int, share_from: int | None = None, shared: int = 0) -> list[dict]:
        rows = []
        if share_from is not None:
            for row in self.seq_rows[share_from][:shared]:
                self.ref[row] += 1
                rows.append(row)
        rows += [self._mint(seq) for _ in range(blocks - len(rows))]
        self.seq_rows[seq] = rows
        return [{"op": "add_sequence", "seq": seq}, {"op": "prepare_write", "seq": seq, "start": 0,
                                                     "num_tokens": blocks * BLOCK}]

    def grow(self, seq: int) -> list[dict]:
        self.seq_rows[seq].append(self._mint(seq))
        return [{"op": "prepare_write", "seq": seq, "start": (len(self.seq_rows[seq]) - 1) * BLOCK,
                 "num_tokens": BLOCK}]

    def release(self, seq: int) -> list[dict]:
        freed = []
        for row in self.seq_rows.pop(seq):
            self.ref[row] -= 1
            if self.ref[row] == 0:
                self.owner[row] = -1
                freed.append(row)
            elif self.owner[row] == seq:
                self.owner[row] = next(s for s, rows in self.seq_rows.items() if row in rows)
        return [{"op": "release", "seq": seq}, {"op": "rows_freed", "rows": freed}]

    def gather_all(self) -> None:
        for rows in self.seq_rows.values():
            runs = 1 + sum(1 for a, b in zip(rows, rows[1:]) if a // self.slab_blocks != b // self.slab_blocks)
            self.hist[str(runs)] = self.hist.get(str(runs), 0) + 1  # per layer: one gather per sequence

    def snapshot(self) -> dict:
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
        layer = {"num_slabs": self.num_slabs, "capacity_rows": capacity, "row_owner": owners, "row_refcount": refs,
                 "free_rows": len(free), "holes": holes, "largest_free_run": largest,
                 "fragmentation": 0.0 if not free else 1 - largest / len(free), "gather_runs_hist": dict(self.hist),
                 "fused": {"use_fused": False, "reason": "no GPU kernel backend (CPU)"}}
        return {"design": self.design, "block_size": BLOCK, "slab_blocks": self.slab_blocks,
                "num_layers": self.num_layers, "dtype": "float32", "n_kv_heads": 2, "head_dim": 8,
                "bytes_per_row": 1024,
                "stats": {"allocated_blocks": live, "live_blocks": live, "free_blocks": len(free),
                          "bytes_reserved": capacity * 1024 * self.num_layers,
                          "bytes_in_use": live * 1024 * self.num_layers, "num_sequences": len(self.seq_rows),
                          "num_handles": 0},
                "counters": {"slab_appends": self.num_slabs, "grow_events": 0, "bytes_copied": 0, "cow_copies": 1,
                             "rows_minted": len(self.owner), "rows_reused": 0, "gathers": 0, "gather_runs_total": 0,
                             "fused_decisions": 0, "gather_decisions": self.num_layers},
                "layers": [dict(layer, row_owner=list(owners), row_refcount=list(refs))
                           for _ in range(self.num_layers)],
                "seq_rows": {str(s): list(rows) for s, rows in self.seq_rows.items()}}


def event_stream(backend: str = "slab", steps: int = 24, t0: float = 1000.0, num_layers: int = 3) -> list[dict]:
    """A full run: meta, phases, steps, samples, snapshots, ops, fused events, done. Sequences 1-3 arrive (2 shares
    1's first block), grow, 1 and 3 finish early so rows are freed and reused by 4."""
    pool = SimPool(num_layers=num_layers) if backend != "dense" else None
    ev: list[dict] = [{"kind": "meta", "t": t0, "t_start": t0, "backend": backend, "scenario": "churn",
                       "model": "synthetic:tiny", "step": 0, "tokens": 0}]
    t, tokens = t0, 0

    def add(kind: str, **fields) -> None:
        ev.append({"kind": kind, "t": t, "step": step, "tokens": tokens, **fields})

    step = 0
    add("phase", name="burst", edge="start")
    for step in range(1, steps + 1):
        t = t0 + step * 0.5
        ops: list[dict] = []
        if pool is not None:
            if step == 1:
                ops += pool.add(1, 3) + pool.add(2, 3, share_from=1, shared=1) + pool.add(3, 2)
                ops.append({"op": "cow", "seq": 2, "logical_block": 1, "num_layers": num_layers})
            elif step in (8, 12):
                ops += pool.release(1 if step == 8 else 3)
            elif step == 13:
                ops += pool.add(4, 3)
            elif step % 3 == 0:
                ops += pool.grow(2)
            pool.gather_all()
        kind = "prefill" if step in (1, 13) else "decode"
        tokens += 24 if kind == "prefill" else 3
        add("step", phase="burst", type=kind, batch=3, num_tokens=24 if kind == "prefill" else 3, wall_s=0.05)
        if ops:
            add("op", ops=ops)
        base = 50e6 if backend == "dense" else 40e6
        active = base + step * 1e6 + (8e6 if step == 12 else 0)
        add("sample", active=active, cache=2e6, peak=active, rss=active + 30e6, sys_available=8e9,
            footprint=active + 2e6, weights=30e6, pool_live=5e6, pool_free=1e6, other_active=active - 36e6,
            rss_other=30e6 - 2e6)
        if pool is not None:
            add("snapshot", snapshot=pool.snapshot())
            add("fused", layer=step % num_layers, use_fused=step % 5 == 0,
                reason="fused" if step % 5 == 0 else "layer has more than one slab")
        if step == steps // 2:
            add("probe_stats", overhead={"cost_fraction": 0.012})
    add("phase", name="burst", edge="end")
    add("done", summary={"steps": steps, "probe_overhead": {"cost_fraction": 0.011}})
    return ev


class FakeWorker:
    """WorkerHandle stand-in: hands out ``events`` a few at a time; optional crash after ``crash_after`` events."""

    def __init__(self, events: list[dict], per_poll: int = 20, crash_after: int | None = None) -> None:
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

    def poll(self) -> list[dict]:
        if not self.alive:
            return []
        end = min(len(self.events), self.sent + self.per_poll)
        if self.crash_after is not None and end >= self.crash_after:
            batch = self.events[self.sent:self.crash_after]
            self.sent = self.crash_after
            self.error = "killed by signal 9 (likely out of memory)"
            return batch + [{"kind": "error", "t": batch[-1]["t"] if batch else 0.0, "text": self.error,
                             "traceback": "", "origin": "parent"}]
        batch = self.events[self.sent:end]
        self.sent = end
        return batch

    def cancel(self) -> None:
        self.cancelled = True


def big_stream(num_layers: int = 28, num_slabs: int = 64, slab_blocks: int = 32, steps: int = 6,
               t0: float = 500.0) -> list[dict]:
    """A pool the size the issue asks the UI to stay responsive with (28 layers x 64 slabs of 32 rows): 40
    sequences interleaved across every slab, some rows shared, a free hole every 5th row."""
    rows = num_slabs * slab_blocks
    owners = [-1 if r % 5 == 4 else (r // 3) % 40 for r in range(rows)]
    refs = [0 if o < 0 else (2 if r % 17 == 0 else 1) for r, o in enumerate(owners)]
    seq_rows: dict[str, list[int]] = {}
    for r, o in enumerate(owners):
        if o >= 0:
            seq_rows.setdefault(str(o), []).append(r)
    layer = {"num_slabs": num_slabs, "capacity_rows": rows, "row_owner": owners, "row_refcount": refs,
             "free_rows": owners.count(-1), "holes": owners.count(-1), "largest_free_run": 1,
             "fragmentation": 1 - 1 / max(1, owners.count(-1)), "gather_runs_hist": {"40": 12, "64": 3},
             "fused": {"use_fused": False, "reason": "layer has more than one slab"}}
    snap = {"design": "slab", "block_size": 32, "slab_blocks": slab_blocks, "num_layers": num_layers,
            "dtype": "bfloat16", "n_kv_heads": 8, "head_dim": 128, "bytes_per_row": 131072,
            "stats": {"allocated_blocks": rows, "live_blocks": rows - owners.count(-1), "free_blocks": 0,
                      "bytes_reserved": rows * 131072 * num_layers, "bytes_in_use": 0, "num_sequences": 40,
                      "num_handles": 0},
            "counters": {}, "layers": [dict(layer) for _ in range(num_layers)], "seq_rows": seq_rows}
    events = [{"kind": "meta", "t": t0, "t_start": t0, "backend": "slab", "step": 0, "tokens": 0}]
    for step in range(1, steps + 1):
        t = t0 + step * 0.5
        events.append({"kind": "sample", "t": t, "step": step, "tokens": step * 40, "active": 4e9 + step * 1e8,
                       "cache": 1e8, "rss": 5e9, "footprint": 4.1e9 + step * 1e8})
        events.append({"kind": "snapshot", "t": t, "step": step, "tokens": step * 40, "snapshot": snap})
    events.append({"kind": "done", "t": t0 + steps * 0.5, "step": steps, "tokens": steps * 40, "summary": {}})
    return events
