"""Process lifecycle: a SIGKILLed ``slabscope record`` leaves no process of its run behind (worker, resource
tracker), and the worker's recording says why it stopped; a worker killed from outside is reported with
what is known (signal, memory at the last sample vs the limit) before any guess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.workloads.parent_watch import ParentWatch
from app.workloads.worker import describe_memory_at_death
from probes.events import Sample, WorkerError

from .helpers import write_scenario

LONG_IDLE = '[params]\nseconds = 120.0\n[[phases]]\nname = "wait"\nkind = "idle"\nseconds = "$seconds"\n'


def _session_processes(sid: int) -> dict[int, str]:
    """{pid: command} of the live (not zombie) processes in session ``sid``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != "Z":
            found[int(entry.name)] = cmd.strip()
    return found


def _wait(predicate, timeout: float, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_sigkill_of_the_record_parent_leaves_no_process_behind(tmp_path):
    """The worker notices its parent is gone and stops through its cancel path (its recording says why); every
    process of the run exits. (How fast is the parent watch's poll and grace; the wait here only bounds a hang.)"""
    scenario = write_scenario(tmp_path, LONG_IDLE, name="wait")
    out = tmp_path / "rec"
    with open(tmp_path / "record.log", "wb") as log:
        parent = subprocess.Popen([sys.executable, "-m", "app", "record", "--scenario", scenario, "--backends",
                                   "slab", "--out", str(out), "--model", "synthetic:tiny-llama"],
                                  stdout=log, stderr=log, start_new_session=True)
    recording = out / "wait-slab.slabrec"
    try:
        # the worker is recording (file written past its header) and every process of the run is up
        assert _wait(lambda: recording.exists() and recording.stat().st_size > 2048, 90.0), \
            (tmp_path / "record.log").read_text()[-2000:]
        before = _session_processes(parent.pid)
        assert len(before) >= 3, before  # parent, worker, multiprocessing's resource tracker
        assert any("resource_tracker" in cmd for cmd in before.values()), before
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(5)
        t0 = time.monotonic()
        left = _wait(lambda: not _session_processes(parent.pid), 60.0)
        assert left, f"still alive after 60 s: {_session_processes(parent.pid)}"
        print(f"\nall {len(before)} processes of the run gone {time.monotonic() - t0:.2f} s after the SIGKILL")
    finally:
        for pid in _session_processes(parent.pid):
            os.kill(pid, signal.SIGKILL)
    from probes.replay import Session

    session = Session.open(recording)
    errors = session.events_of(WorkerError)
    assert errors and "parent process" in errors[-1].text and "is gone" in errors[-1].text, errors
    assert session.complete and session.summary.summary.get("cancelled") is True  # stopped through the cancel path


def test_the_parent_watch_reports_once_the_parent_id_changes(monkeypatch):
    calls: list[str] = []
    watch = ParentWatch(os.getppid() + 10**6, calls.append, poll_s=0.01, grace_s=60.0).start()
    assert _wait(lambda: calls, 60.0) and "is gone" in calls[0] and watch.orphaned and watch.checks == 0
    watch.stop()  # the run ended within the grace: no hard exit


def test_the_parent_watch_stays_quiet_while_the_parent_lives():
    """Five reads of a living parent's id (the watch did look), then stop: nothing was reported."""
    calls: list[str] = []
    watch = ParentWatch(os.getppid(), calls.append, poll_s=0.01).start()
    assert _wait(lambda: watch.checks >= 5, 60.0), "the watch thread never read the parent id"
    watch.stop()
    watch._thread.join(60.0)
    assert calls == [] and not watch.orphaned and not watch._thread.is_alive()


def _sample(t: float, rss: int, available: int) -> Sample:
    return Sample(t=t, active=0, cache=0, footprint=0, peak=0, footprint_max=0, rss=rss, rss_max=rss,
                  sys_available=available, weights=0, pool_live=0, pool_free=0, other_active=0, rss_other=rss,
                  cost_us=0.0)


def test_a_kill_is_described_by_the_last_sample_before_any_guess():
    from pool.device_limits import host_memory

    host = host_memory()
    low = _sample(10.0, rss=200 * 2**20, available=host.total_bytes // 2)
    text = describe_memory_at_death(low, now=12.5)
    assert text.startswith("last memory sample 2.5 s before: RSS 200 MiB")
    assert host.source in text and "a kill by another process is more likely than OOM" in text
    high = _sample(10.0, rss=int(0.9 * host.limit_bytes), available=host.total_bytes // 100)
    assert describe_memory_at_death(high, now=10.0).endswith("likely out of memory (the kernel's OOM killer sends "
                                                             "SIGKILL)")
    assert "unknown" in describe_memory_at_death(None)
