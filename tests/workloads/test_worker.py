"""Worker processes: events stream from a spawned process; errors, cancel and SIGKILL reach the caller."""

import os
import signal
import time

import pytest

import app.workloads.worker as worker_module
from app.workloads.spec import RunSpec
from app.workloads.worker import WorkerHandle
from probes.events import Done, LogLine, PhaseEdge, WorkerError

from .helpers import burst_toml, stubborn_worker, write_scenario

pytestmark = pytest.mark.slow

SMALL = burst_toml(n=3, concurrency=3, prompt_tokens="[10, 40]", gen_tokens="4")
LONG_IDLE = """
[params]
seconds = 60.0
[[phases]]
name = "wait"
kind = "idle"
seconds = "$seconds"
"""


def _wait_for(handle, predicate, timeout=60.0):
    events = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events.extend(handle.poll())
        if predicate(events):
            return events
        time.sleep(0.02)
    raise AssertionError(f"timed out; got {[e['kind'] for e in events]}")


def test_worker_streams_meta_phases_steps_snapshots_and_done(tmp_path):
    spec = RunSpec(scenario=write_scenario(tmp_path, SMALL), backend="slab", model="synthetic:tiny-llama",
                   block_size=4, slab_blocks=2, snapshot_hz=50.0, blas_threads=1)
    handle = WorkerHandle(spec, log_path=str(tmp_path / "w.log")).start()
    events = handle.join(60.0)
    kinds = [e.kind for e in events]
    assert handle.done and handle.error is None, (handle.error, kinds)
    # where it is first, said before the probes start (importing MLX, then the model); then the probes' meta
    assert kinds[:3] == ["stage", "stage", "meta"] and kinds[-1] == "done", kinds[:4]
    assert [e.detail for e in events[:2]] == ["importing MLX", "synthetic:tiny-llama"]
    assert {"phase", "step", "snapshot", "sample"} <= set(kinds)  # sample: the probes run in the worker
    assert events[2].meta["backend"] == "slab" and events[2].meta["model"]["name"] == "synthetic:tiny-llama"
    assert handle.summary["requests_finished"] == 3
    assert _wait_exit(handle) == 0


def _wait_exit(handle, timeout=60.0):
    deadline = time.monotonic() + timeout
    while handle.alive and time.monotonic() < deadline:
        time.sleep(0.02)
    return handle.exitcode


def test_an_exception_in_the_worker_reaches_the_caller_with_its_traceback(tmp_path):
    model = tmp_path / "broken-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(b"not safetensors")
    handle = WorkerHandle(RunSpec(scenario=write_scenario(tmp_path, SMALL), model=str(model))).start()
    events = handle.join(60.0)
    errors = [e for e in events if isinstance(e, WorkerError)]
    assert errors and "could not load the mlx-lm model" in errors[0].text
    assert "Traceback (most recent call last)" in errors[0].traceback and "_load_local" in errors[0].traceback
    assert handle.error == errors[0].text and isinstance(events[-1], Done)


def test_a_users_error_in_the_worker_is_one_line_without_a_traceback(tmp_path):
    bad = write_scenario(tmp_path, SMALL.replace('gen_tokens = 4', 'gen_tokens = "$missing"'))
    handle = WorkerHandle(RunSpec(scenario=bad, model="synthetic:tiny-llama")).start()
    events = handle.join(60.0)
    errors = [e for e in events if isinstance(e, WorkerError)]
    assert errors and "ScenarioError" in errors[0].text and "unknown parameter $missing" in errors[0].text
    assert errors[0].traceback == "" and isinstance(events[-1], Done)


def test_cancel_stops_a_running_worker_through_its_stop_event(tmp_path, monkeypatch):
    """Cancel mid-phase: the worker sees the stop event, ends its run through the cancel path (a Done whose summary
    says cancelled) and exits by itself with status 0. The grace before the terminate fallback is made long here
    (it only bounds a hang): on a loaded machine the worker's own exit may take longer than the product's 0.5 s,
    and this test is about the stop event being honoured, not about speed."""
    monkeypatch.setattr(worker_module, "CANCEL_GRACE_S", 60.0)
    spec = RunSpec(scenario=write_scenario(tmp_path, LONG_IDLE), backend="slab", model="synthetic:tiny-llama")
    handle = WorkerHandle(spec).start()
    _wait_for(handle, lambda evs: any(isinstance(e, PhaseEdge) for e in evs))
    handle.cancel()
    assert not handle.alive and handle.exitcode == 0
    events = handle.join(60.0)
    assert isinstance(events[-1], Done) and events[-1].summary.get("cancelled") is True and handle.error is None


def test_cancel_terminates_a_worker_that_ignores_its_stop_event(tmp_path, monkeypatch):
    """A worker stuck in a step never sees the stop event: cancel returns with it terminated (SIGTERM after the
    grace), and the handle says it was killed after cancel, not that it crashed by itself."""
    monkeypatch.setattr(worker_module, "_worker_main", stubborn_worker)
    handle = WorkerHandle(RunSpec(scenario="churn", model="synthetic:tiny-llama")).start()
    _wait_for(handle, lambda evs: any(isinstance(e, LogLine) for e in evs))
    handle.cancel()
    assert not handle.alive and handle.exitcode == -signal.SIGTERM
    events = handle.poll()
    assert [e.text for e in events if isinstance(e, WorkerError)] == ["killed by signal 15 (SIGTERM) after cancel"]


def test_a_worker_killed_by_sigkill_is_reported_not_waited_on(tmp_path):
    spec = RunSpec(scenario=write_scenario(tmp_path, LONG_IDLE), backend="dense", model="synthetic:tiny-llama")
    handle = WorkerHandle(spec).start()
    _wait_for(handle, lambda evs: any(isinstance(e, PhaseEdge) for e in evs))
    os.kill(handle.pid, signal.SIGKILL)
    events = _wait_for(handle, lambda evs: any(isinstance(e, WorkerError) for e in evs))
    assert "killed by signal 9 (SIGKILL) from outside the worker; last memory sample" in handle.error
    assert [e for e in events if isinstance(e, WorkerError)][0].origin == "parent"
