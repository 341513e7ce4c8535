"""The TUI opening a folder of many recordings (app/tui/opening.py): past 16 files they open off the UI thread, the
status bar counts them ("OPENING k/N"), and a quit is handled while they open: the opening stops before its next
file and nothing is installed. It used to open them on the UI thread (2,000 recordings: 19 s with q and Ctrl-C
unanswered). The opening is held at a gate here (a loader that waits), so the order of events is what is tested,
not speed; the gate's wait is bounded, so a UI thread that does wait on it still ends."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
from tui_helpers import settle, wait_for
from tui_paths import SAMPLE_SLAB

import app.tui.sources as sources
from app.tui.app import AppOptions, SlabscopeApp
from app.tui.opening import BACKGROUND_FILES

COUNT = BACKGROUND_FILES + 8


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "many"
    root.mkdir()
    for index in range(COUNT):
        path = root / f"s{index:03d}.slabrec"
        try:
            os.link(SAMPLE_SLAB, path)
        except OSError:
            path.write_bytes(SAMPLE_SLAB.read_bytes())
    return root


@pytest.fixture
def gated(monkeypatch):
    """The loader holds before its 4th file until ``release`` is set (at most 30 s)."""
    state = {"calls": 0, "held": threading.Event(), "release": threading.Event()}
    real = sources.load_recording

    def load(path, name=None):
        state["calls"] += 1
        if state["calls"] == 4:
            state["held"].set()
            state["release"].wait(30)
        return real(path, name)

    monkeypatch.setattr(sources, "load_recording", load)
    return state


def test_quit_is_handled_while_many_recordings_open(tmp_path, folder, gated):
    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=[folder], recordings_dir=tmp_path))
        async with app.run_test(size=(110, 32)) as pilot:
            await wait_for(pilot, gated["held"].is_set)
            status = app._mode_label()
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running)
        return app, status

    app, status = asyncio.run(go())
    calls_at_quit = gated["calls"]
    job = getattr(app, "opening", None)
    gated["release"].set()
    if job is not None:
        job.thread.join(30)
        assert not job.thread.is_alive()
    assert calls_at_quit == gated["calls"] == 4  # quit while the 4th file was held; no 5th file was opened
    assert status == "OPENING 3/24" and app.store.sessions == {}


def test_many_recordings_open_in_the_background_and_are_shown(tmp_path, folder):
    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=[folder], recordings_dir=tmp_path))
        async with app.run_test(size=(110, 32)) as pilot:
            await wait_for(pilot, lambda: len(app.store.sessions) == COUNT, timeout=120)
            return app.opening, app.mode, app._mode_label()

    opening, mode, label = asyncio.run(go())
    assert opening is None and mode == "REPLAY" and label.startswith("REPLAY")


def test_a_few_recordings_still_open_before_the_first_frame(tmp_path):
    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=[SAMPLE_SLAB], recordings_dir=tmp_path))
        async with app.run_test(size=(110, 32)):
            return app.opening, list(app.store.sessions)

    opening, sessions = asyncio.run(go())
    assert opening is None and sessions == ["slab"]


def test_the_sessions_view_lists_a_large_directory_off_the_ui_thread(folder, monkeypatch):
    """The Sessions view's listing (it opens every file to describe it) of a folder of many recordings: held at a
    gate on the 4th file, the header says how far it got and q still quits; nothing more is read."""
    state = {"calls": 0, "held": threading.Event(), "release": threading.Event()}
    real = sources.describe

    def describe(path):
        state["calls"] += 1
        if state["calls"] == 4:
            state["held"].set()
            state["release"].wait(30)
        return real(path)

    monkeypatch.setattr(sources, "describe", describe)

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, recordings_dir=folder))
        async with app.run_test(size=(110, 32)) as pilot:
            await wait_for(pilot, state["held"].is_set)
            await pilot.press("7")
            await settle(pilot)
            header = str(app.query_one("#sessions-header").render())
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running)
            return getattr(app.query_one("#view-sessions"), "listing", None), header

    listing, header = asyncio.run(go())
    calls_at_quit = state["calls"]
    state["release"].set()
    if listing is not None:
        listing.thread.join(30)
    assert calls_at_quit == state["calls"] == 4
    assert f"listing 3/{COUNT}" in header
