"""Crash safety: a writer killed with SIGKILL at an arbitrary instant leaves a file that opens and holds every
record whose write had completed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

from probes.replay import Session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from probes.recording import SessionRecorder
    rec = SessionRecorder(sys.argv[1], {"scenario": "crash"}, 0.0)
    i = 0
    while True:
        batch = [{"kind": "sample", "t": i * 0.01 + k * 0.001, "step": i, "tokens": i, "footprint": i * 10 + k,
                  "blob": "y" * (k * 300)} for k in range(8)]
        batch.append({"kind": "op", "t": i * 0.01, "ops": [{"op": "add_sequence", "seq": i}]})
        rec.write(batch)
        print(i, flush=True)   # batch i is completely written
        i += 1
        time.sleep(0.002)
""")


@pytest.mark.parametrize("kill_after_s", [0.15, 0.4, 0.7])
def test_sigkill_mid_write_keeps_completed_records(tmp_path, kill_after_s):
    path = tmp_path / "crash.slabrec"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), ROOT], stdout=subprocess.PIPE, text=True)
    confirmed = -1
    deadline = time.monotonic() + 20
    while confirmed < 5 and time.monotonic() < deadline:  # wait until it is really writing
        confirmed = int(proc.stdout.readline())
    time.sleep(kill_after_s)
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    lines = [int(x) for x in out.split()]
    confirmed = max(lines, default=confirmed)
    s = Session.open(path)
    assert not s.complete
    steps = sorted({x["step"] for x in s.samples})
    assert steps == list(range(len(steps))), "records form a prefix: nothing lost in the middle"
    assert len(steps) >= confirmed + 1
    assert [op["seq"] for op in s.ops] == list(range(len(s.ops)))
    assert len(s.ops) >= confirmed + 1
    per_step = Counter(x["step"] for x in s.samples)
    assert all(per_step[st] == 8 for st in steps), "a batch is written whole or not at all"



PROBES_WORKER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2]); sys.path.insert(0, sys.argv[3])
    from probes_scripted import record_scripted
    record_scripted(sys.argv[1], steps=100000)
""")


def test_sigkill_of_a_worker_with_live_probes_leaves_a_usable_session(tmp_path):
    """The real WorkerProbes (sampler thread, 0.5 s file flushes, keyframes) killed mid-run."""
    path = tmp_path / "worker.slabrec"
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen([sys.executable, "-c", PROBES_WORKER, str(path), ROOT, here])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not path.exists() or path.stat().st_size < 20000):
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    s = Session.open(path)
    assert not s.complete and s.meta["scenario"] == "scripted"
    assert len(s.samples) >= 2 and len(s.keyframes) >= 1 and len(s.ops) > 0
    assert [op["i"] for op in s.ops] == list(range(len(s.ops)))
    last = s.snapshots[-1]
    rebuilt = s.snapshot_at(last["t"])
    assert rebuilt["stats"] == last["snapshot"]["stats"]
