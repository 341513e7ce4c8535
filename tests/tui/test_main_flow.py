"""The main flow on the real worker path: start a live run (real spawned workers, tiny synthetic model) -> start
recording -> samples appear -> stop -> open the recording -> scrub -> inspector drill-down."""

from __future__ import annotations

import asyncio

import pytest
from tui_helpers import finished, settle, wait_for
from tui_real_workers import tiny_factory
from tui_screen_text import screen_text
from textual.widgets import DataTable

from app.tui.app import AppOptions, SlabscopeApp
from app.tui.widgets.scrubber import Scrubber

pytestmark = pytest.mark.slow


def test_live_run_record_open_scrub_inspect(tmp_path):
    recs = tmp_path / "recs"

    async def go():
        app = SlabscopeApp(AppOptions(scenario="churn", worker_factory=tiny_factory, recordings_dir=recs))
        out = {}
        async with app.run_test(size=(100, 34)) as pilot:
            # live: recording is switched on while the workers spawn (the tiny run is over in about a second
            # once they are up), then samples appear in both backends
            await pilot.press("R")
            await wait_for(pilot, lambda: app.controller.recording, timeout=5)
            await wait_for(pilot, lambda: all(len(t.samples) for t in app.store.sessions.values()), timeout=60)
            await wait_for(pilot, lambda: finished(app), timeout=60)
            await settle(pilot)
            out["live_text"] = screen_text(app)
            out["live_status"] = {n: t.status for n, t in app.store.sessions.items()}
            await pilot.press("R")  # stop recording
            await wait_for(pilot, lambda: not app.controller.recording and app.controller.recorded_paths(),
                           timeout=5)
            out["paths"] = app.controller.recorded_paths()
            # sessions: the new files are listed; open the slab one
            await pilot.press("7")
            view = app.screen.query_one("#view-sessions")
            view.action_rescan()
            await settle(pilot)
            names = [info.path.name for info in view.infos]
            out["listed"] = names
            # the files just saved read back whole (an unreadable one fails here with its reason, not as a hang on
            # the open below: tests/tui/test_live_recording.py)
            states = {i.path.name: i.error or ("complete" if i.complete else "partial") for i in view.infos}
            assert set(states.values()) == {"complete"}, states
            assert {i.scenario for i in view.infos} == {"churn"}, "the recordings lack their run's metadata"
            listing = app.screen.query_one("#sessions-list", DataTable)
            listing.move_cursor(row=len(view.folders) + next(i for i, n in enumerate(names) if n.endswith("-slab.slabrec")))
            listing.focus()
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.mode == "REPLAY")
            out["replay_tracks"] = list(app.store.sessions)
            # scrub: step back twice, then click the scrubber's start
            start = app.cursor
            await pilot.press("2", "left_square_bracket", "left_square_bracket")
            out["stepped"] = (start, app.cursor)
            await pilot.click(Scrubber, offset=(2, 0))
            await settle(pilot)
            out["clicked"] = app.cursor
            await pilot.press("P")  # the peak moment; then step back to one with live sequences to inspect
            for _ in range(400):
                found = app.frame().snapshot()
                if found and found[1].seq_rows:
                    break
                await pilot.press("left_square_bracket")
            await settle(pilot)
            out["slabs_text"] = screen_text(app)
            # inspector drill-down on the recording
            await pilot.press("6", "e")
            await settle(pilot)
            out["inspect_text"] = screen_text(app)
        return app, out

    app, out = asyncio.run(go())
    assert out["live_status"] == {"slab": "done", "dense": "done"}
    assert "slab/dense" in out["live_text"] and "probes: slab" in out["live_text"]
    assert sorted(p.name.rsplit("-", 1)[-1] for p in out["paths"]) == ["dense.slabrec", "slab.slabrec"]
    assert all(p.exists() and p.stat().st_size > 0 for p in out["paths"])
    assert sorted(out["listed"]) == sorted(p.name for p in out["paths"])
    assert out["replay_tracks"] == ["slab"]
    start, stepped = out["stepped"]
    assert stepped < start
    assert out["clicked"] < stepped
    assert "REPLAY" in out["slabs_text"] and "rows live" in out["slabs_text"]
    assert "gather runs:" in out["inspect_text"] and "row  state  owner" in out["inspect_text"]
