"""``record``'s workers leave no named semaphores behind (app/workloads/worker.py ``WorkerHandle.close``). Each worker
is reached through a multiprocessing queue and a stop event: eight named semaphores registered with
multiprocessing's resource tracker. They lived until ``record`` exited, so a ``record`` ended by a signal (a
harness's timeout, a stopped TUI run) during its second backend left sixteen of them to the tracker: "There appear
to be 16 leaked semaphore objects to clean up at shutdown". Now each worker's go as it finishes, and SIGTERM, SIGHUP
or Ctrl-C stop ``record`` through the same path (one line, exit 128 + signal)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from multiprocessing import resource_tracker
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--model", "synthetic:tiny-llama", "--scenario", "churn", "--set", "prompt_max=128", "--set", "gen_max=16"]
LEAK = "leaked semaphore"


def test_a_worker_releases_its_semaphores_when_it_finishes_not_at_exit(cli, monkeypatch, tmp_path):
    """In-process: the semaphores still registered when each backend's worker starts (and when record returns,
    before anything is garbage-collected)."""
    from app.workloads.worker import WorkerHandle

    live: set[str] = set()
    send = resource_tracker._resource_tracker._send

    def tracked(cmd, name, rtype):
        if rtype == "semaphore":
            (live.add if cmd == "REGISTER" else live.discard)(name)
        return send(cmd, name, rtype)

    outstanding, start = [], WorkerHandle.start

    def counted_start(self):
        outstanding.append(len(live))
        return start(self)

    monkeypatch.setattr(resource_tracker._resource_tracker, "_send", tracked)
    monkeypatch.setattr(WorkerHandle, "start", counted_start)
    code, _, _ = cli(["record", *TINY, "--set", "n=2", "--backends", "slab,dense", "--out", str(tmp_path / "rec")])
    assert code == 0
    assert outstanding == [0, 0]  # slab's semaphores were gone before dense's worker started
    assert live == set()


def test_record_run_to_the_end_warns_of_nothing(tmp_path):
    result = subprocess.run([sys.executable, "-m", "app", "record", *TINY, "--set", "n=2", "--backends",
                             "slab", "--out", str(tmp_path / "rec")], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert LEAK not in result.stderr and "resource_tracker" not in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_record_stopped_during_its_second_backend_leaves_nothing(tmp_path, sig):
    """The signal goes once the second backend reported progress (its first status line on stderr); the first one
    is cut short by ``--timeout`` (a cancelled worker releases its semaphores too)."""
    proc = subprocess.Popen([sys.executable, "-m", "app", "record", *TINY, "--set", "n=400", "--timeout", "1",
                             "--out", str(tmp_path / "rec")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines: list[str] = []
    second = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("[dense"):
                second.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert second.wait(120), "".join(lines)
        proc.send_signal(sig)
        proc.wait(60)
        reader.join(60)  # EOF once the resource tracker, which shares stderr, is gone too
    finally:
        proc.kill()
    rest = [line for line in lines if not line.startswith("[")]
    assert proc.returncode == 128 + sig and not reader.is_alive()
    assert [line.strip() for line in rest if line.strip()] == \
        [f"slabscope record: stopped by {sig.name}: 2 of 3 backends started, every worker stopped"]
    assert not any(LEAK in line for line in lines)
