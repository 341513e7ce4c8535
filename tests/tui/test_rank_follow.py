"""The follower of a live distributed run (app.tui.rank_live.RankRecordRun) on rank recordings this test writes
itself, with stand-in processes for ``record`` and the ranks: a run is shown once every rank's file is there, its
sessions grow as the files do, a rank whose process is gone without closing its file is marked failed within a
poll, a run that never got all its ranks is one line with the others shown alone, and stopping kills the whole
process tree of ``record``."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import psutil
import pytest

from app.tui import rank_live
from app.tui.data import SessionSet
from app.tui.rank_live import RankRecordRun, RankRunChoice, record_command
from app.workloads.spec import PoolChoice
from probes.events import PhaseEdge, Sample
from probes.recording import SessionRecorder

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
# a stand-in for record that ignores SIGTERM and has a child that does too (as a stuck launcher would)
STUBBORN = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)']); time.sleep(120)")
T0 = 500.0


def sample(t: float, footprint: int) -> Sample:
    return Sample(t=T0 + t, step=int(t * 10), tokens=int(t * 10), active=footprint, cache=0, footprint=footprint,
                  peak=footprint, footprint_max=footprint, rss=footprint, rss_max=footprint, sys_available=0,
                  weights=0, pool_live=0, pool_free=0, other_active=footprint, rss_other=0, cost_us=0.0)


def rank_writer(out, rank: int, pid: int, world: int = 2) -> SessionRecorder:
    meta = {"backend": "dense", "scenario": "churn", "distributed": {
        "run_id": "r1", "rank": rank, "world_size": world, "launch_backend": "ring", "host": socket.gethostname(),
        "pid": pid, "shard": {"kv_heads": [rank, rank + 1], "n_kv_heads_total": world},
        "clock": {"offset_s": 0.0, "bound_s": 1e-4}}}
    rec = SessionRecorder(out / f"churn-dense-rank{rank}.slabrec", meta, T0)
    rec.write([PhaseEdge(name="churn", edge="start", t=T0)])
    return rec


def wait_until(predicate, timeout: float = 60.0) -> None:
    """Poll ``predicate`` until true; the timeout only bounds a hang."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.01)


def full_pass(run: RankRecordRun) -> None:
    """Wait until the follower completed a whole pass that began after now (everything written before this call
    was seen by it)."""
    seen = run.passes
    wait_until(lambda: run.passes >= seen + 2)


@pytest.fixture
def follower(tmp_path, monkeypatch):
    """A RankRecordRun whose ``record`` is a sleeping stand-in process (with one child, like mlx.launch)."""
    monkeypatch.setattr(rank_live, "record_command", lambda choice, out: [sys.executable, "-c", STUBBORN])
    monkeypatch.setattr(rank_live, "POLL_S", 0.05)
    monkeypatch.setattr(rank_live, "STOP_WAIT_S", 0.5)
    store = SessionSet()
    run = RankRecordRun(store, RankRunChoice("churn", "synthetic:tiny-llama", ["dense"], 2), tmp_path / "out")
    ranks = [subprocess.Popen(SLEEPER) for _ in range(2)]
    yield store, run.start(), ranks
    run.stop()
    for p in ranks:
        p.kill()
        p.wait()


def test_a_run_shows_once_every_rank_wrote_and_grows_with_its_files(follower):
    store, run, ranks = follower
    out = run.out
    r0 = rank_writer(out, 0, ranks[0].pid)
    r0.write([sample(0.1 * i, 1000 + i) for i in range(5)])
    full_pass(run)
    assert len(run.sessions[out / "churn-dense-rank0.slabrec"].samples) == 5  # the follower read rank 0 ...
    assert store.sessions == {} and store.runs == []  # ... and shows nothing: rank 1 has not written its file yet
    r1 = rank_writer(out, 1, ranks[1].pid)
    wait_until(lambda: len(store.runs) == 1)
    assert set(store.sessions) == {"dense r0", "dense r1"} and store.runs[0].world_size == 2
    r1.write([sample(0.1 * i, 2000 + i) for i in range(8)])
    wait_until(lambda: len(store.sessions["dense r1"].samples) == 8)
    assert store.sessions["dense r0"].status == "running" and getattr(store.sessions["dense r0"], "growing")
    r0.close({}, t=T0 + 1.0)
    r1.close({}, t=T0 + 1.0)
    wait_until(lambda: all(m.complete for m in store.sessions.values()))


def test_a_rank_whose_process_is_gone_without_closing_its_file_is_marked_failed(follower):
    store, run, ranks = follower
    out = run.out
    writers = [rank_writer(out, rank, ranks[rank].pid) for rank in (0, 1)]
    for w in writers:
        w.write([sample(0.1, 1000)])
    wait_until(lambda: len(store.runs) == 1)
    ranks[1].kill()
    ranks[1].wait()
    full_pass(run)  # the first whole pass after the process is gone marks it: no waiting on the rank
    assert store.sessions["dense r1"].error is not None
    assert f"rank process {ranks[1].pid} ended without closing its recording" in store.sessions["dense r1"].error.text
    assert store.sessions["dense r0"].error is None  # its process lives on


def test_stopping_kills_record_and_everything_under_it(follower):
    """Even a record (and a child) that ignore SIGTERM: after STOP_WAIT_S every process of the tree is killed."""
    store, run, _ = follower
    wait_until(lambda: len(psutil.Process(run.process.pid).children(recursive=True)) == 1)
    tree = [psutil.Process(run.process.pid), *psutil.Process(run.process.pid).children(recursive=True)]
    run.stop(wait=2.0)
    wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree))
    wait_until(lambda: run.done)


def test_a_run_missing_a_rank_when_record_ends_is_one_line_and_the_rest_show_alone(follower):
    store, run, ranks = follower
    rank_writer(run.out, 0, ranks[0].pid).close({}, t=T0 + 1.0)
    full_pass(run)
    assert run.out / "churn-dense-rank0.slabrec" in run.sessions and store.sessions == {}  # read, not shown alone
    run.stop(wait=60.0)  # record ends without rank 1 ever writing; waits (a hang bound) for the follower's last pass
    assert list(store.sessions) == ["dense r0"] and store.runs == []
    assert store.problems == {"r1": "run r1: 1 of 2 ranks wrote no recording; showing the others alone"}


def test_the_record_command_names_every_choice(tmp_path):
    choice = RankRunChoice("churn", "synthetic:tiny-llama", ["slab", "dense"], 4, "nccl", PoolChoice(8, 4, "compact"),
                           ("--set", "n=3"))
    from app.cli import build_parser

    command = record_command(choice, tmp_path)
    assert command[:4] == [sys.executable, "-m", "app", "record"]
    args = build_parser().parse_args(command[3:])  # what record itself will read
    assert (args.ranks, args.launch_backend, args.backends, args.model, args.scenario) == \
        (4, "nccl", ["slab", "dense"], "synthetic:tiny-llama", "churn")
    assert (args.block_size, args.slab_blocks, args.out, args.set) == (8, 4, str(tmp_path), ["n=3"])
    assert args.stop_with_parent and args.shrink == "compact"  # the run form's shrink reaches every rank
    default = build_parser().parse_args(record_command(RankRunChoice("churn", "m", ["slab"], 2), tmp_path)[3:])
    assert default.shrink == "off"
