"""Stopping ``slabscope record --ranks`` leaves no process behind: mlx.launch runs in its own process group (so that
record can stop it), which a signal to record alone would never reach. SIGTERM (the TUI's stop) and the loss of
record's parent (``--stop-with-parent``: a TUI that was killed) both stop the launcher and every rank, and the ranks
close their recordings with why they stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from app.workloads.launch import live_pids
from probes.errors import RecordingError
from probes.events import Step
from probes.replay import Session

pytestmark = pytest.mark.slow
RECORD = [sys.executable, "-m", "app", "record", "--ranks", "2", "--scenario", "churn", "--backends", "slab,dense",
          "--model", "synthetic:tiny-llama", "--set", "n=400"]


def _running_ranks(out, proc_alive) -> None:
    """Wait until both ranks of slab are recording steps."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc_alive(), "record ended early"
        try:
            if all(Session.open(out / f"churn-slab-rank{r}.slabrec").events_of(Step) for r in (0, 1)):
                return
        except RecordingError:  # not written yet (missing, or no header yet)
            pass
        time.sleep(0.2)
    raise AssertionError("the ranks did not start")


def _wait_gone(processes, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while live_pids(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    return live_pids(processes)


def test_sigterm_stops_the_launcher_and_every_rank(tmp_path):
    proc = subprocess.Popen([*RECORD, "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    _running_ranks(tmp_path, lambda: proc.poll() is None)
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    assert len(tree) == 4  # record, mlx.launch, two ranks
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert _wait_gone(tree, 10) == []
    assert "stopped by SIGTERM: every rank was stopped, no further backend started" in text
    for rank in (0, 1):
        session = Session.open(tmp_path / f"churn-slab-rank{rank}.slabrec")
        assert session.complete and "SIGTERM received" in session.summary.summary["error"]
    assert not (tmp_path / "churn-dense-rank0.slabrec").exists()  # no further backend started


def test_record_stops_with_its_parent(tmp_path):
    """A parent (the TUI) that is SIGKILLed: record notices its new parent and stops every rank."""
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               f"subprocess.Popen({[*RECORD, '--out', str(tmp_path), '--stop-with-parent']!r}, "
                               "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); time.sleep(600)"])
    tree = []
    try:
        _running_ranks(tmp_path, lambda: parent.poll() is None)
        tree = psutil.Process(parent.pid).children(recursive=True)
        assert len(tree) == 4
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _wait_gone(tree, 30) == []
    finally:
        parent.kill()
        for p in tree:  # only what this test started, should the check above have failed
            try:
                p.kill()
            except psutil.Error:
                pass
    for rank in (0, 1):
        assert Session.open(tmp_path / f"churn-slab-rank{rank}.slabrec").complete
