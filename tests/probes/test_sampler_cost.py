"""The memory sampler's cheap reads: RSS from /proc/self/statm agrees with psutil, and the system's available
memory is read at most once per SYS_AVAILABLE_PERIOD_S (between reads a sample carries the last value)."""

from __future__ import annotations

import psutil
import pytest

import probes.sampler as sampler_mod
from probes.sampler import MemorySampler


def test_rss_from_statm_matches_psutil():
    sampler = MemorySampler(0)
    rss = sampler.sample(0, 0)["rss"]
    assert abs(rss - psutil.Process().memory_info().rss) < 64 * 2**20


def test_system_available_memory_is_read_at_most_once_per_period(monkeypatch):
    reads = []
    real = psutil.virtual_memory

    def counting():
        reads.append(1)
        return real()

    sampler = MemorySampler(0)
    monkeypatch.setattr(sampler._psutil, "virtual_memory", counting)
    clock = [1000.0]
    monkeypatch.setattr(sampler_mod.time, "monotonic", lambda: clock[0])
    first = sampler.sample(0, 0)["sys_available"]
    for _ in range(50):
        clock[0] += 0.01  # 100 Hz for half a second
        assert sampler.sample(0, 0)["sys_available"] == first
    assert len(reads) == 1
    clock[0] += sampler_mod.SYS_AVAILABLE_PERIOD_S
    sampler.sample(0, 0)
    assert len(reads) == 2


@pytest.mark.skipif(not hasattr(__import__("os"), "pread"), reason="pread-less platform")
def test_rss_falls_back_to_psutil_when_statm_is_unreadable():
    sampler = MemorySampler(0)
    sampler._rss.close()
    assert sampler.sample(0, 0)["rss"] > 0
