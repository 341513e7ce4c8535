"""Who takes a memory sample: the workload thread at a step boundary when one is due, the probe thread only when
the workload has stopped ticking (a stall), and the probe thread never wakes for a sample the workload may take.
A probe thread waking ``sample_hz`` times a second paid a wake-up and a GIL hand-over per sample (lab/probe_cost)."""

from __future__ import annotations

import threading

import pytest

from probes.events import Sample
from probes.live import STALL_PERIODS, WorkerProbes


def _samples(probes) -> list[Sample]:
    with probes._lock:
        pending = list(probes._buffer)
    return [e for e in probes.sender.sink + pending if isinstance(e, Sample)]


def test_a_ticking_workload_takes_the_samples_and_the_probe_thread_takes_none():
    """Period ~0 (every tick is due) and flushes a day apart: the probe thread never wakes, so every sample after
    the one at start is a tick's, one per tick, in order."""
    probes = WorkerProbes(None, sample_hz=1e9, snapshot_hz=0.0, meta={"scenario": "t"}, flush_s=86400.0,
                          stats_every_s=86400.0)
    probes.start()
    for step in range(1, 6):
        probes.tick(step, step * 10)
    samples = _samples(probes)
    assert [s.step for s in samples] == [0, 1, 2, 3, 4, 5]
    assert [s.t for s in samples] == sorted(s.t for s in samples)
    assert probes._thread_sampled is False
    probes.stop()


def test_no_tick_sample_before_its_period():
    probes = WorkerProbes(None, sample_hz=1e-6, snapshot_hz=0.0, meta={"scenario": "t"}, flush_s=86400.0,
                          stats_every_s=86400.0)
    probes.start()
    for step in range(1, 4):
        probes.tick(step, step)
    assert [s.step for s in _samples(probes)] == [0]
    probes.stop()


def test_the_probe_thread_samples_a_stalled_workload():
    """No tick at all (a long step): the probe thread finds the stall at a flush wake-up and samples it, then every
    period while it lasts."""
    probes = WorkerProbes(None, sample_hz=1000.0, snapshot_hz=0.0, meta={"scenario": "t"}, flush_s=0.005)
    stalled = threading.Event()
    real = probes._take_sample

    def watched(by_thread: bool) -> None:
        real(by_thread)
        if by_thread and probes.sampler.num_samples >= 5:
            stalled.set()

    probes._take_sample = watched
    probes.start()
    assert stalled.wait(30), "the probe thread never sampled the stall"
    probes.stop()
    assert probes._thread_sampled is False  # stop's last sample is the workload thread's


def test_the_probe_thread_wakes_only_for_flushes_and_stats_while_the_workload_samples():
    probes = WorkerProbes(None, sample_hz=100.0, snapshot_hz=0.0, meta={"scenario": "t"})
    probes._last_sample_t, probes._thread_sampled = 1000.0, False
    assert probes._next_wake(1000.5, 1002.0) == 1000.5  # not 1000.01 nor 1000.02: the workload may sample first
    assert probes._next_wake(1003.0, 1002.0) == 1002.0
    probes._thread_sampled = True  # a stall is being sampled: every period
    assert probes._next_wake(1000.5, 1002.0) == pytest.approx(1000.01)


def test_a_stall_is_a_number_of_periods_without_a_workload_sample():
    probes = WorkerProbes(None, sample_hz=100.0, snapshot_hz=0.0, meta={"scenario": "t"})
    probes._last_sample_t, probes._thread_sampled = 1000.0, False
    assert not probes._stalled(1000.0 + 0.01 * STALL_PERIODS - 1e-4)
    assert probes._stalled(1000.0 + 0.01 * STALL_PERIODS + 1e-4)
    probes._thread_sampled = True
    assert probes._stalled(1000.0101) and not probes._stalled(1000.0099)
