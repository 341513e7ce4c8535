"""Samplers against known allocations; accounting identities; transport drops the oldest batch; probes events."""

from __future__ import annotations

import queue
import time
from types import SimpleNamespace

import mlx.core as mx
import msgspec
import pytest

from pool import PoolBytes
from pool_writes import write_kv
from pool.ops import Release
from probes.events import Dropped, LogLine, ProbeStats
from probes.live import WorkerProbes
from probes.events import Sample
from probes.sampler import FOOTPRINT_PARTS, SAMPLE_FIELDS as SAMPLER_FIELDS, MemorySampler, accounting_parts
from probes.transport import BatchSender, decode_batch
from pool_writes import write_kv


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
    sampler.attach_pool(SimpleNamespace(bytes_now=lambda: PoolBytes(live=300, reserved=500, slabs=7)))
    s = sampler.sample(0, 0)
    parts = accounting_parts(s)
    mlx_parts = sum(p.bytes for p in parts[:-1])
    assert mlx_parts == s.footprint and parts[-1].label == "unexplained RSS"
    assert mlx_parts + parts[-1].bytes == s.rss
    assert s.pool_live == 300 and s.pool_free == 200 and s.pool_slabs == 7
    assert s.other_active == s.active - 1000 - 500


class NonBlockingQueue(queue.Queue):
    """A queue that fails any blocking put or get: on a full queue with nobody reading, one would wait forever."""

    def put(self, item, block=True, timeout=None):
        assert not block, "a blocking put: the worker would wait for its reader"
        return super().put(item, block=False)

    def get(self, block=True, timeout=None):
        assert not block, "a blocking get"
        return super().get(block=False)


def test_full_queue_drops_oldest_batch_and_never_blocks():
    q = NonBlockingQueue(maxsize=2)
    sender = BatchSender(q)
    for i in range(5):
        sender.send([LogLine(text=str(i))])
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
        if step < 15:  # one probe-thread sample per step at least: 16 in all with the one at start
            _wait_until(lambda: probes.sampler.num_samples >= step + 2)
    # The probe thread flushed into the full queue (drops), and it checks stats_every_s after each sample: its
    # 12th sample comes at least 0.12 s after it started, so a ProbeStats was queued before the 14th in all.
    _wait_until(lambda: probes.sender.dropped_batches > 0 and probes.sampler.num_samples >= 14)
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


def _wait_until(predicate, timeout: float = 30.0) -> None:
    """Poll ``predicate`` until true; the timeout only bounds a hang."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "the probe thread never got there"
        time.sleep(0.002)


def _latest_sample_after(probes, count: int) -> Sample:
    """The newest sample once the probe thread has taken ``count`` samples in all (waits for it)."""
    _wait_until(lambda: probes.sampler.num_samples >= count)
    with probes._lock:
        pending = list(probes._buffer)
    return [e for e in probes.sender.sink + pending if isinstance(e, Sample)][-1]


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
                write_kv(pool, layer, step, 0, keys, keys)
        probes.tick(step, step)
        stats = pool.stats()
        sample = _latest_sample_after(probes, probes.sampler.num_samples + 2)
        assert (sample.pool_live, sample.pool_free) == (stats.bytes_in_use,
                                                       stats.bytes_reserved - stats.bytes_in_use), step
        assert sample.pool_slabs == sum(len(pool.slabs(layer)[0]) for layer in range(2))  # slab tensors
        assert sample.other_active == sample.active - stats.bytes_reserved
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
            probes.emit(LogLine(text="x"))
        probes.tick(1, 1)
    overhead = probes.overhead()
    probes.stop()
    inside = overhead.workload_thread_s / overhead.wall_s
    assert inside > 0.2  # emit/tick were most of the wall time
    expected = (overhead.probe_thread_cpu_s + overhead.workload_thread_s) / overhead.wall_s
    assert overhead.cost_fraction == pytest.approx(expected, rel=0.02)
    assert overhead.cost_fraction >= inside * 0.98


class _Readings:
    """Stands in for mlx.core, psutil and the process: fixed, known memory readings."""

    active, cache, peak, rss, available = 5000, 700, 6000, 9000, 123456

    def get_active_memory(self):
        return self.active

    def get_cache_memory(self):
        return self.cache

    def memory_info(self):
        return SimpleNamespace(rss=self.rss)

    def virtual_memory(self):
        return SimpleNamespace(available=self.available)


def _known_sampler(monkeypatch, discrete: bool, weight_bytes: int = 1000):
    import probes.sampler as sampler_module

    readings = _Readings()
    sampler = MemorySampler(weight_bytes) if weight_bytes is not None else MemorySampler()
    sampler._mx, sampler._psutil, sampler._proc = readings, readings, readings
    sampler._rss = lambda: readings.rss
    sampler._peak_memory = lambda: readings.peak
    sampler.discrete = discrete
    clock = iter([10.0, 10.00001234, 20.0, 20.0000456])  # thread_time (CPU) at the start and end of each sample
    monkeypatch.setattr(sampler_module.time, "thread_time", lambda: next(clock))
    monkeypatch.setattr(sampler_module.time, "monotonic", lambda: 77.5)
    return sampler, readings


def test_every_sample_field_from_known_readings(monkeypatch):
    sampler, readings = _known_sampler(monkeypatch, discrete=False)
    sampler.attach_pool(SimpleNamespace(bytes_now=lambda: PoolBytes(live=300, reserved=500, slabs=7)))
    first = sampler.sample(3, 41)
    assert first == Sample(
        t=77.5, step=3, tokens=41, active=5000, cache=700, footprint=5700,
        peak=6000, footprint_max=5700, rss=9000, rss_max=9000, sys_available=123456,
        weights=1000, pool_live=300, pool_free=200, pool_slabs=7, other_active=5000 - 1000 - 500,
        rss_other=9000 - 5700, cost_us=12.3)
    assert set(msgspec.structs.asdict(first)) == set(SAMPLER_FIELDS)
    assert msgspec.json.decode(msgspec.json.encode(first))["kind"] == "sample"  # the record's tag on the wire
    readings.active, readings.cache, readings.rss = 100, 50, 8000  # everything fell: the maxima stay
    second = sampler.sample(4, 42)
    assert (second.footprint_max, second.rss_max, second.cost_us) == (5700, 9000, 45.6)
    assert sampler.num_samples == 2 and sampler.total_cost_s == pytest.approx(0.00001234 + 0.0000456)


def test_discrete_gpu_and_no_pool_samples(monkeypatch):
    """Discrete CUDA: MLX's memory is not in RSS, so RSS not explained by MLX is all of it. No pool (dense): the
    pool fields are 0. No weights given: 0."""
    sampler, _ = _known_sampler(monkeypatch, discrete=True, weight_bytes=None)
    s = sampler.sample(0, 0)
    assert s.rss_other == 9000 and s.weights == 0 and s.cost_us == 12.3
    assert (s.pool_live, s.pool_free, s.pool_slabs) == (0, 0, 0) and s.other_active == 5000


def test_accounting_parts_of_a_sample_missing_fields_are_zero():
    """A sample recorded before pool_slabs existed (None: not recorded) still splits; all-zero readings give zeros."""
    zero = Sample(**{name: 0 for name in SAMPLER_FIELDS if name != "pool_slabs"})
    assert zero.pool_slabs is None
    parts = accounting_parts(zero)
    assert {p.bytes for p in parts} == {0} and [p.label for p in parts[:-1]] == list(FOOTPRINT_PARTS)


def test_the_sampler_asks_the_device_memory_model(monkeypatch):
    import probes.meta

    for model, discrete in (("discrete", True), ("unified", False)):
        monkeypatch.setattr(probes.meta, "device_memory_model", lambda m=model: m)
        assert MemorySampler().discrete is discrete


def test_maxima_start_from_zero(monkeypatch):
    sampler, readings = _known_sampler(monkeypatch, discrete=False)
    readings.active = readings.cache = readings.rss = 0  # an empty reading: the maxima are 0, not a seed value
    s = sampler.sample(0, 0)
    assert (s.footprint_max, s.rss_max) == (0, 0)


def test_stop_records_the_pool_state_at_stop_as_a_final_keyframe(tmp_path):
    """No periodic snapshot falls due (0.000001 Hz): besides the one at start, the recording holds the pool as it
    was at stop, taken after the last op, whole (a keyframe, so the session's end seeks without a rebuild)."""
    from pool import PagedKVPool, PoolConfig
    from probes.replay import Session

    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=4, slab_blocks=2))
    probes = WorkerProbes(None, sample_hz=1.0, snapshot_hz=1e-6, record_path=tmp_path / "s.slabrec",
                          meta={"scenario": "t"}, keyframe_interval_s=1e9)
    probes.attach_pool(pool)
    probes.start()
    keys = mx.ones((8, 2, 4))
    for seq in (1, 2):
        pool.add_sequence(seq)
        pool.prepare_write(seq, 0, 8)
        for layer in range(2):
            write_kv(pool, layer, seq, 0, keys, keys)
        probes.tick(seq, seq * 8)
    pool.release(1)
    probes.stop()
    session = Session.open(tmp_path / "s.slabrec")
    assert len(session.snapshots) == 2 and len(session.keyframes) == 2
    final, last_op = session.keyframes[-1], session.all_ops()[-1]
    assert final.t == session.snapshots[-1].t >= last_op.t and last_op.op == Release(seq=1)
    assert final.load().snapshot == pool.snapshot() and session.snapshots[-1].snapshot.stats == pool.stats()


def test_a_samples_cost_is_its_threads_cpu_time_not_its_wait_for_the_gil(monkeypatch):
    """The RSS read releases the GIL; getting it back waits for the workload thread (up to the 5 ms switch
    interval while a decode step builds its graph). That wait is the workload running, not the probe's cost:
    cost_us counts the sampling thread's CPU time (clocks faked: 4 us of CPU, 900 us of wall per sample)."""
    import probes.sampler as sampler_module

    clocks = {"cpu": 0.0, "wall": 0.0}

    def rss_read_waiting_for_the_gil():
        clocks["cpu"] += 4e-6
        clocks["wall"] += 900e-6
        return 4096

    monkeypatch.setattr(sampler_module.time, "thread_time", lambda: clocks["cpu"])
    monkeypatch.setattr(sampler_module.time, "perf_counter", lambda: clocks["wall"])
    sampler = MemorySampler(weight_bytes=0)
    sampler._rss = rss_read_waiting_for_the_gil
    sample = sampler.sample(0, 0)
    assert sample.cost_us == 4.0 and sampler.total_cost_s == pytest.approx(4e-6)
