"""Samplers against known allocations; accounting identities; transport drops the oldest batch; probes events."""

from __future__ import annotations

import queue
import time
from types import SimpleNamespace

import mlx.core as mx
import pytest

from probes.live import WorkerProbes
from probes.sampler import MemorySampler, accounting_parts
from probes.transport import BatchSender


def test_active_rises_by_the_allocated_bytes_and_cache_takes_it_back():
    sampler = MemorySampler(weight_bytes=0)
    mx.clear_cache()
    before = sampler.sample(0, 0)
    x = mx.ones((512, 1024), dtype=mx.float32)  # 2 MiB exactly
    mx.eval(x)
    held = sampler.sample(1, 0)
    assert held["active"] - before["active"] == 512 * 1024 * 4
    assert held["footprint"] == held["active"] + held["cache"]
    del x
    freed = sampler.sample(2, 0)
    assert freed["active"] == before["active"]
    assert freed["footprint"] >= before["footprint"]  # the buffer moved to MLX's cache (or was returned)
    assert held["footprint_max"] >= held["footprint"] and freed["footprint_max"] == max(
        s["footprint"] for s in (before, held, freed))
    assert held["rss"] > 0 and held["sys_available"] > 0 and held["cost_us"] > 0


def test_accounting_parts_sum_to_footprint_and_rss():
    sampler = MemorySampler(weight_bytes=1000)
    sampler.attach_pool(SimpleNamespace(live_bytes=lambda: 300, reserved_bytes=lambda: 500, slab_count=lambda: 7))
    s = sampler.sample(0, 0)
    parts = accounting_parts(s)
    mlx_parts = sum(v for k, v in parts.items() if k != "RSS not explained by MLX")
    assert mlx_parts == s["footprint"]
    assert mlx_parts + parts["RSS not explained by MLX"] == s["rss"]
    assert s["pool_live"] == 300 and s["pool_free"] == 200 and s["pool_slabs"] == 7
    assert s["other_active"] == s["active"] - 1000 - 500


def test_full_queue_drops_oldest_batch_and_never_blocks():
    q = queue.Queue(maxsize=2)
    sender = BatchSender(q)
    for i in range(5):
        start = time.perf_counter()
        sender.send([{"kind": "log", "i": i}])
        assert time.perf_counter() - start < 0.05
    assert sender.dropped_batches == 3 and sender.dropped_events == 3
    assert [q.get_nowait()[0]["i"] for _ in range(2)] == [3, 4]


def test_probes_sample_batch_count_drops_and_measure_their_cost(tmp_path):
    q = queue.Queue(maxsize=1)  # a reader that never reads
    probes = WorkerProbes(q, sample_hz=100.0, record_path=tmp_path / "p.slabrec", meta={"scenario": "t"},
                          stats_every_s=0.1)
    probes.start()
    for step in range(30):
        probes.emit({"kind": "log", "text": f"step {step}"})
        probes.tick(step, step * 2)
        time.sleep(0.01)
    summary = probes.stop({"ok": True})
    overhead = summary["probe_overhead"]
    assert overhead["samples"] >= 10 and overhead["sample_cost_us_mean"] > 0
    assert 0 < overhead["cost_fraction"] < 1 and overhead["dropped_batches"] > 0
    from probes.replay import Session

    s = Session.open(tmp_path / "p.slabrec")
    assert s.complete and s.summary["summary"]["ok"] is True
    assert len([e for e in s.events if e["kind"] == "log"]) == 30, "the file keeps what the queue dropped"
    assert any(e["kind"] == "dropped" for e in s.events) and any(e["kind"] == "probe_stats" for e in s.events)
    assert s.overhead == overhead
    steps = [x["step"] for x in s.samples]
    assert steps == sorted(steps) and steps[-1] == 29
    assert s.meta["mlx_version"] and s.meta["device"] and s.meta["sample_hz"] == 100.0


def _latest_sample_after(probes, count: int, timeout: float = 5.0) -> dict:
    """The newest sample once the probe thread has taken ``count`` samples in all (waits for it)."""
    deadline = time.monotonic() + timeout
    while probes.sampler.num_samples < count:
        assert time.monotonic() < deadline, "the probe thread took no sample"
        time.sleep(0.002)
    with probes._lock:
        pending = list(probes._buffer)
    return [e for e in probes.sender.sink + pending if e["kind"] == "sample"][-1]


def test_sampled_pool_bytes_follow_the_pool_between_snapshots():
    """Snapshots at 0.1 Hz (none due during the run), samples at 200 Hz: every sample taken after a step carries
    that step's pool bytes. (Before, pool bytes were copied from the last snapshot: the accounting stack showed a
    growing pool as "other MLX active" until the next one.)"""
    from pool import PagedKVPool, PoolConfig

    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=4, slab_blocks=2))
    probes = WorkerProbes(None, sample_hz=200.0, snapshot_hz=0.1, meta={"scenario": "t"})
    probes.attach_pool(pool)
    probes.start()
    keys = mx.ones((8, 2, 4))
    for step in range(1, 13):
        if step % 4 == 0:
            pool.release(step - 3)  # live bytes fall, reserved bytes stay
        else:
            pool.add_sequence(step)
            pool.prepare_write(step, 0, 8)
            for layer in range(2):
                pool.write(layer, step, 0, keys, keys)
        probes.tick(step, step)
        stats = pool.stats()
        sample = _latest_sample_after(probes, probes.sampler.num_samples + 2)
        assert (sample["pool_live"], sample["pool_free"]) == (stats.bytes_in_use,
                                                             stats.bytes_reserved - stats.bytes_in_use), step
        assert sample["pool_slabs"] == sum(pool.storage.num_slabs(layer) for layer in range(2))
        assert sample["other_active"] == sample["active"] - stats.bytes_reserved
    assert probes._num_snapshots == 1  # only the one taken at start: the samples did not wait for snapshots
    probes.stop()


def test_probe_cost_counts_the_workload_threads_time_inside_the_probes():
    """cost_fraction = (probe-thread CPU + workload-thread time inside the probes) / wall. Here the workload thread
    does nothing but call the probes, so its share dominates: a fraction that left it out would be near 0."""
    probes = WorkerProbes(None, sample_hz=1.0, snapshot_hz=0.0, meta={"scenario": "t"})
    probes.start()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        for _ in range(200):
            probes.emit({"kind": "log", "text": "x"})
        probes.tick(1, 1)
    overhead = probes.overhead()
    probes.stop()
    inside = overhead["workload_thread_s"] / overhead["wall_s"]
    assert inside > 0.2  # emit/tick were most of the wall time
    expected = (overhead["probe_thread_cpu_s"] + overhead["workload_thread_s"]) / overhead["wall_s"]
    assert overhead["cost_fraction"] == pytest.approx(expected, rel=0.02)
    assert overhead["cost_fraction"] >= inside * 0.98
