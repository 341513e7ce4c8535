"""Stopping ``slabscope record --ranks`` leaves no process behind: mlx.launch runs in its own process group (so that
record can stop it), which a signal to record alone would never reach. The loss of record's parent
(``--stop-with-parent``: a TUI that was killed) makes record stop itself through its SIGTERM path, which stops the
launcher and every rank, and the ranks close their recordings with why they stopped. (SIGTERM sent by the TUI, and
record's exit status for it, are checked by tests/tui/test_ranks_live.py on its one live launch.)"""

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


def test_record_stops_with_its_parent_and_stops_every_rank(tmp_path):
    """A parent (the TUI) that is SIGKILLed: record notices its new parent and stops itself as SIGTERM would (the
    TUI's own stop sends SIGTERM: tests/tui/test_ranks_live.py): the launcher and both ranks of slab are gone,
    each rank closed its recording with why it stopped, record says so, and no further backend started."""
    log = tmp_path / "record.log"
    record = [*RECORD, "--out", str(tmp_path), "--stop-with-parent"]
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               f"subprocess.Popen({record!r}, stdout=open({str(log)!r}, 'w'), "
                               "stderr=subprocess.STDOUT); time.sleep(600)"])
    tree = []
    try:
        _running_ranks(tmp_path, lambda: parent.poll() is None)
        tree = psutil.Process(parent.pid).children(recursive=True)
        assert len(tree) == 4  # record, mlx.launch, two ranks
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _wait_gone(tree, 120) == []
    finally:
        parent.kill()
        for p in tree:  # only what this test started, should the check above have failed
            try:
                p.kill()
            except psutil.Error:
                pass
    text = log.read_text()
    assert "stopped by SIGTERM: every rank was stopped, no further backend started" in text, text
    for rank in (0, 1):
        session = Session.open(tmp_path / f"churn-slab-rank{rank}.slabrec")
        error = session.summary.summary["error"]
        # mlx.launch forwards the SIGTERM to its ranks and exits: a rank sees whichever comes first, the signal or
        # its watchdog finding the launcher gone; either way it closed its recording with why it stopped
        assert session.complete and ("SIGTERM received" in error or "the launcher (pid" in error), error
    assert not (tmp_path / "churn-dense-rank0.slabrec").exists()  # no further backend started
