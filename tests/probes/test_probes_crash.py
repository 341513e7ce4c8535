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
    import sys
    sys.path.insert(0, sys.argv[2])
    from pool.ops import AddSequence
    from probes.events import LogLine, OpBatch, Sample
    from probes.recording import SessionRecorder
    rec = SessionRecorder(sys.argv[1], {"scenario": "crash"}, 0.0)
    i = 0
    while True:
        batch = [Sample(t=i * 0.01 + k * 0.001, step=i, tokens=i, active=0, cache=0, footprint=i * 10 + k, peak=0,
                        footprint_max=0, rss=0, rss_max=0, sys_available=0, weights=0, pool_live=0, pool_free=0,
                        other_active=0, rss_other=0, cost_us=0.0) for k in range(8)]
        batch += [LogLine(t=i * 0.01, step=i, text="y" * (k * 300)) for k in range(8)]
        batch.append(OpBatch(t=i * 0.01, ops=[AddSequence(i)], op_t=[i * 0.01]))
        rec.write(batch)
        print(i, flush=True)   # batch i is completely written
        i += 1
""")


@pytest.mark.parametrize("kill_after_batches", [5, 40, 150])
def test_sigkill_mid_write_keeps_completed_records(tmp_path, kill_after_batches):
    """The writer writes without pause; the kill lands wherever it is once it confirmed ``kill_after_batches``
    batches (usually inside a write)."""
    path = tmp_path / "crash.slabrec"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), ROOT], stdout=subprocess.PIPE, text=True)
    confirmed = -1
    while confirmed < kill_after_batches:
        line = proc.stdout.readline()
        assert line, "the writer stopped before writing"
        confirmed = int(line)
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    lines = [int(x) for x in out.split()]
    confirmed = max(lines, default=confirmed)
    s = Session.open(path)
    assert not s.complete
    sample_steps = s.samples.window().step
    steps = sorted(set(sample_steps))
    assert steps == list(range(len(steps))), "records form a prefix: nothing lost in the middle"
    assert len(steps) >= confirmed + 1
    ops = s.all_ops()
    assert [entry.op.seq for entry in ops] == list(range(len(ops)))
    assert len(ops) >= confirmed + 1
    per_step = Counter(sample_steps)
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
    deadline = time.monotonic() + 120  # bounds a hang
    while not path.exists() or path.stat().st_size < 20000:  # several file flushes in: killed mid-run
        assert time.monotonic() < deadline and proc.poll() is None, "the worker wrote too little"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    s = Session.open(path)
    assert not s.complete and s.meta["scenario"] == "scripted"
    ops = s.all_ops()
    assert len(s.samples) >= 2 and len(s.keyframes) >= 1 and len(ops) > 0
    assert [entry.i for entry in ops] == list(range(len(ops)))
    last = s.snapshots[-1]
    rebuilt = s.snapshot_at(last.t)
    assert rebuilt.stats == last.snapshot.stats
