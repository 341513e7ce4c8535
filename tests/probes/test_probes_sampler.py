"""Samplers against known allocations; accounting identities; transport drops the oldest batch; probes events."""

from __future__ import annotations

import queue
import time

import mlx.core as mx
import msgspec

from probes.events import Dropped, LogLine, ProbeStats
from probes.live import WorkerProbes
from probes.sampler import MemorySampler, accounting_parts
from probes.transport import BatchSender, decode_batch


def test_active_rises_by_the_allocated_bytes_and_cache_takes_it_back():
    sampler = MemorySampler(weight_bytes=0)
    mx.clear_cache()
    before = sampler.sample(0, 0)
    x = mx.ones((512, 1024), dtype=mx.float32)  # 2 MiB exactly
    mx.eval(x)
    held = sampler.sample(1, 0)
    assert held.active - before.active == 512 * 1024 * 4
    assert held.footprint == held.active + held.cache
    del x
    freed = sampler.sample(2, 0)
    assert freed.active == before.active
    assert freed.footprint >= before.footprint  # the buffer moved to MLX's cache (or was returned)
    assert held.footprint_max >= held.footprint and freed.footprint_max == max(
        s.footprint for s in (before, held, freed))
    assert held.rss > 0 and held.sys_available > 0 and held.cost_us > 0


def test_accounting_parts_sum_to_footprint_and_rss():
    sampler = MemorySampler(weight_bytes=1000)
    sampler.pool_bytes = (300, 500)
    s = sampler.sample(0, 0)
    parts = accounting_parts(s)
    mlx_parts = sum(p.bytes for p in parts[:-1])
    assert mlx_parts == s.footprint and parts[-1].label == "unexplained RSS"
    assert mlx_parts + parts[-1].bytes == s.rss
    assert s.pool_live == 300 and s.pool_free == 200


def test_full_queue_drops_oldest_batch_and_never_blocks():
    q = queue.Queue(maxsize=2)
    sender = BatchSender(q)
    for i in range(5):
        start = time.perf_counter()
        sender.send([LogLine(text=str(i))])
        assert time.perf_counter() - start < 0.05
    assert sender.dropped_batches == 3 and sender.dropped_events == 3
    assert [decode_batch(q.get_nowait())[0].text for _ in range(2)] == ["3", "4"]


def test_probes_sample_batch_count_drops_and_measure_their_cost(tmp_path):
    q = queue.Queue(maxsize=1)  # a reader that never reads
    probes = WorkerProbes(q, sample_hz=100.0, record_path=tmp_path / "p.slabrec", meta={"scenario": "t"},
                          stats_every_s=0.1)
    probes.start()
    for step in range(30):
        probes.emit(LogLine(text=f"step {step}"))
        probes.tick(step, step * 2)
        time.sleep(0.01)
    summary = probes.stop({"ok": True})
    overhead = summary["probe_overhead"]
    assert overhead["samples"] >= 10 and overhead["sample_cost_us_mean"] > 0
    assert 0 < overhead["cost_fraction"] < 1 and overhead["dropped_batches"] > 0
    from probes.replay import Session

    s = Session.open(tmp_path / "p.slabrec")
    assert s.complete and s.summary.summary["ok"] is True
    assert len(s.events_of(LogLine)) == 30, "the file keeps what the queue dropped"
    assert s.events_of(Dropped) and s.events_of(ProbeStats) and s.dropped_batches > 0
    assert msgspec.to_builtins(s.overhead) == overhead
    steps = s.samples.window().step
    assert steps == sorted(steps) and steps[-1] == 29
    assert s.meta["mlx_version"] and s.meta["device"] and s.meta["sample_hz"] == 100.0
