"""The TUI's R key (``sources.LiveRecorder``) when a recording begins before the run's clock is known.

A worker says "loading model" (``RunStage``) before its probes start and send the metadata with the run's clock
(``t_start``). On a loaded machine the ingest thread's first drain of a worker held both: the recorder opened the
file on that clock and wrote the stages at negative times, which no reader accepts, so the whole recording was
unreadable ("nothing readable after the metadata record") and opening it from the Sessions view never reached
REPLAY (tests/tui/test_main_flow.py hung there under `make test`). On an idle machine the first drain held only
the stages: the file opened without metadata, on a zero clock (times were the worker's raw ``time.monotonic()``,
model and scenario unknown). These tests fix each order of arrival with explicit batches, never with timing.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from tui_fixtures import FakeWorker, event_stream, sample
from tui_helpers import finished, settle, wait_for
from textual.widgets import DataTable

from app.tui.app import AppOptions, SlabscopeApp
from app.tui.sources import LiveRecorder
from probes.events import Done, MetaUpdate, RunStage, WorkerError
from probes.replay import Session
from probes.store import SessionModel

T0 = 1000.0
META = {"t_start": T0, "backend": "slab", "scenario": "churn", "model": "synthetic:tiny", "session_id": "sim"}
STAGES = [RunStage(t=T0 - 2.0, stage="loading model", detail="importing MLX"),
          RunStage(t=T0 - 1.0, stage="loading model", detail="synthetic:tiny")]


def record(batches: list[list], tmp_path, stop: bool = True):
    """Feed ``batches`` to a SessionModel and a LiveRecorder in the ingest thread's order (the model folds a batch
    in, then the recorder writes it); returns (paths after each batch, paths at the end)."""
    model, recorder = SessionModel(label="slab"), LiveRecorder(tmp_path, "churn")
    seen = []
    for batch in batches:
        for event in batch:
            model.append(event)
        recorder.write(model, batch)
        seen.append(list(recorder.paths))
    return seen, recorder.close() if stop else recorder.paths


def opened(path) -> Session:
    session = Session.open(path)
    assert session.complete and session.damage is None
    return session


@pytest.mark.parametrize("split", [False, True], ids=["stages-and-meta-in-one-batch", "stages-first"])
def test_a_recording_begun_while_the_worker_loads_is_readable_on_the_workers_clock(tmp_path, split):
    rest = [MetaUpdate(t=T0, meta=META), sample(T0 + 0.5, 1, 3, 40e6), Done(t=T0 + 1.0, summary={"steps": 1})]
    batches = [STAGES, rest] if split else [STAGES + rest]
    seen, paths = record(batches, tmp_path)
    if split:
        assert seen[0] == []  # no file before the run's clock is known
    session = opened(paths[0])
    assert session.meta["model"] == "synthetic:tiny" and session.meta["scenario"] == "churn"
    assert session.meta["t_start"] == T0
    assert [(e.t, e.detail) for e in session.events] == [(0.0, "importing MLX"), (0.0, "synthetic:tiny")]
    assert list(session.samples.window().t) == [0.5] and session.duration == 1.0


def test_a_worker_that_fails_while_loading_is_recorded_on_its_first_stamp(tmp_path):
    failed = [WorkerError(t=T0 + 0.25, step=-1, tokens=-1, text="no such model"), Done(t=T0 + 0.25, summary={})]
    seen, paths = record([STAGES, failed], tmp_path)
    assert seen == [[], paths]
    session = opened(paths[0])
    assert session.meta["t_start"] == T0 + 0.25 and session.meta["backend"] == "slab"
    assert [(type(e).__name__, e.t) for e in session.events] == [("RunStage", 0.0), ("RunStage", 0.0),
                                                                 ("WorkerError", 0.0)]


def test_a_recording_stopped_while_the_worker_loads_keeps_what_it_said(tmp_path):
    seen, paths = record([STAGES], tmp_path)
    assert seen == [[]] and len(paths) == 1
    session = opened(paths[0])
    assert session.meta["t_start"] == T0 - 2.0
    assert [(e.t, e.detail) for e in session.events] == [(0.0, "importing MLX"), (1.0, "synthetic:tiny")]


class GatedWorker(FakeWorker):
    """A fake worker that says nothing until ``gate`` is set, then hands out its stages, metadata and first events
    in one poll: the ingest thread's first drain on a loaded machine."""

    def __init__(self, events: list, gate: threading.Event) -> None:
        super().__init__(events, per_poll=25)
        self.gate = gate

    def poll(self) -> list:
        return super().poll() if self.gate.is_set() else []


def test_recording_from_the_start_then_opening_it_from_the_sessions_view_replays_it(tmp_path):
    gate = threading.Event()

    def factory(name, **params):
        stages = [RunStage(t=T0 - 2.0, stage="loading model", detail=name)]
        return GatedWorker(stages + event_stream(name, t0=T0), gate)

    async def go():
        app = SlabscopeApp(AppOptions(worker_factory=factory, recordings_dir=tmp_path / "recs"))
        async with app.run_test(size=(100, 34)) as pilot:
            await pilot.press("R")
            await wait_for(pilot, lambda: app.controller.recording)
            gate.set()
            await wait_for(pilot, lambda: finished(app))
            await pilot.press("R")
            await wait_for(pilot, lambda: not app.controller.recording and app.controller.recorded_paths())
            await pilot.press("7")
            view = app.screen.query_one("#view-sessions")
            view.action_rescan()
            await settle(pilot)
            listed = [(i.path.name.rsplit("-", 1)[-1], i.error, i.complete, i.scenario) for i in view.infos]
            assert sorted(listed) == [("dense.slabrec", "", True, "churn"), ("slab.slabrec", "", True, "churn")]
            row = next(i for i, info in enumerate(view.infos) if info.path.name.endswith("-slab.slabrec"))
            listing = app.screen.query_one("#sessions-list", DataTable)
            listing.move_cursor(row=len(view.folders) + row)
            listing.focus()
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.mode == "REPLAY")
            return list(app.store.sessions), app.store.duration()

    tracks, duration = asyncio.run(go())
    assert tracks == ["slab"] and duration == 12.0  # the stream's 24 steps of 0.5 s, on the worker's clock
