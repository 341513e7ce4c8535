"""The dashboard following a live server (Pilot): ``slabscope --open DIR`` while ``slabscope serve --record DIR`` runs
and ``slabscope load`` drives it. The app follows (LIVE, not a replay), the server's session grows, its requests show
as they arrive and finish (the status bar's in-flight and done counts, the Memory view's arrival lane), and when
the server stops the session ends cleanly. A follower on stand-in recordings swaps a server's next segment in
under the same label and marks a writer that died."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.tui.app import AppOptions, SlabscopeApp
from app.tui.data import SessionSet
from app.tui.live_follow import RecordingFollower, live_paths
from probes.events import RequestArrived, RequestDone
from probes.recording import SessionRecorder

from .server_proc import serve

pytestmark = pytest.mark.slow
MODEL = "synthetic:tiny-llama"


def screen_text(app) -> str:
    return "\n".join(strip.text.rstrip() for strip in app.screen._compositor.render_strips())


async def wait_for(pilot, predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        await pilot.pause(0.05)


def counts(app) -> tuple[int, int]:
    (model,) = app.store.sessions.values()
    return len(model.events_of(RequestArrived)), len(model.events_of(RequestDone))


def test_the_dashboard_follows_a_live_server_while_load_drives_it(tmp_path):
    record = tmp_path / "rec"
    server = serve("--model", MODEL, "--record", str(record), "--sample-hz", "20")
    load_done = threading.Event()
    outcome = {}

    def drive() -> None:
        proc = subprocess.run([sys.executable, "-m", "app", "load", "--url", server.url, "--json", "--scenario",
                               "churn", "--set", "n=12", "concurrency=2", "prompt_min=16", "prompt_max=64",
                               "gen_min=150", "gen_max=250", "--chars-per-token", "1"],
                              capture_output=True, text=True, timeout=300)
        outcome["load"] = proc
        load_done.set()

    async def go():
        app = SlabscopeApp(AppOptions(open_paths=[record], recordings_dir=record, autostart=False))
        async with app.run_test(size=(150, 44)) as pilot:
            await wait_for(pilot, lambda: app.store.sessions and app.mode == "LIVE")
            threading.Thread(target=drive, daemon=True).start()
            await wait_for(pilot, lambda: counts(app)[0] >= 2)  # requests arriving while load runs
            assert not load_done.is_set()
            app.refresh_views()
            await pilot.pause(0.1)
            during = screen_text(app)
            arrived_then = counts(app)[0]
            await wait_for(pilot, lambda: load_done.is_set() and counts(app) == (12, 12), timeout=240)
            app.refresh_views()
            await pilot.pause(0.1)
            after = screen_text(app)
            return app, during, arrived_then, after

    try:
        app, during, arrived_then, after = asyncio.run(go())
    finally:
        code = server.stop()
    assert code == 0 and outcome["load"].returncode == 0
    assert json.loads(outcome["load"].stdout)["completed"] == 12
    assert arrived_then < 12  # the screen showed requests arriving before all had
    assert "in flight" in during and "→ slab" in during  # the status bar's count, the Memory view's arrival lane
    assert "0 in flight, 12 done" in after
    assert app.mode == "LIVE"


def write_segment(directory: Path, server_id: str, segment: int, pid: int, t0: float = 100.0) -> SessionRecorder:
    meta = {"backend": "slab", "pid": pid, "host": __import__("socket").gethostname(),
            "serve": {"server_id": server_id, "segment": segment}}
    rec = SessionRecorder(directory / f"serve-slab-x-{segment:03d}.slabrec", meta, t0)
    rec.write([RequestArrived(t=t0 + segment + 0.1, req_id=segment, prompt_tokens=4, max_tokens=4)])
    return rec


def test_the_follower_swaps_in_the_next_segment_and_marks_a_writer_that_died(tmp_path):
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        first = write_segment(tmp_path, "s1", 0, writer.pid)
        assert live_paths([tmp_path])
        store = SessionSet()
        follower = RecordingFollower(store, [tmp_path])
        follower.poll()
        (label,) = store.sessions
        assert label == "slab" and len(store.sessions[label].events_of(RequestArrived)) == 1
        first.close({"continued_in": "serve-slab-x-001.slabrec"})
        write_segment(tmp_path, "s1", 1, writer.pid)
        follower.poll()
        (model,) = store.sessions.values()
        assert model.path.endswith("-001.slabrec") and model.label == "slab"
        assert [e.req_id for e in model.events_of(RequestArrived)] == [1]
        writer.kill()
        writer.wait()
        follower.poll()
        assert model.error is not None and "ended without closing its recording" in model.error.text
        assert not live_paths([tmp_path])
    finally:
        writer.kill()
        writer.wait()
