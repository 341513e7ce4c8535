"""Snapshot tests (pytest-textual-snapshot) of every view rendered from the sample session shipped in
assets/recordings/ (recorded by the probes from a real SmolLM2 run). Replay opens paused at the end (the Memory
and Sessions pictures are the first screen); the pool views are taken at the peak moment (P), where the pool is
busy. Nothing depends on the wall clock; notifications are cleared before the picture is taken.

Update after an intended visual change: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import os
import shutil

import pytest
from tui_paths import SAMPLE_DENSE, SAMPLE_SLAB

from app.tui.app import AppOptions, SlabscopeApp

SIZE = (100, 32)


@pytest.fixture
def replay_app(tmp_path, monkeypatch):
    """The app replaying both sample sessions side by side, recordings listed from ./recs (fixed mtimes)."""
    recs = tmp_path / "recs"
    recs.mkdir()
    for index, src in enumerate((SAMPLE_SLAB, SAMPLE_DENSE)):
        dst = recs / src.name
        shutil.copyfile(src, dst)
        os.utime(dst, (1_700_000_000 + index, 1_700_000_000 + index))
    monkeypatch.chdir(tmp_path)
    return quiet(SlabscopeApp(AppOptions(autostart=False, open_paths=[recs / SAMPLE_SLAB.name,
                                                                      recs / SAMPLE_DENSE.name],
                                         recordings_dir=recs.relative_to(tmp_path))))


def quiet(app: SlabscopeApp) -> SlabscopeApp:
    """No notification toasts in the pictures: a toast posted at mount lands whenever the app handles its message
    (and one removed leaves its region to a later repaint), so a picture would depend on timing. Notifications are
    checked by the tests that read them (test_hostile_recordings.py, test_ranks.py)."""
    app.notify = lambda *args, **kwargs: None
    return app


async def settle(pilot) -> None:
    """Handle the keys pressed and redraw (the app's own event loop only: a replay has no other thread)."""
    await pilot.pause()
    pilot.app.refresh_views()
    await pilot.pause()


@pytest.mark.parametrize("key,name", [("1", "memory"), ("2", "slabs"), ("3", "fragmentation"), ("4", "gather"),
                                      ("5", "fused"), ("7", "sessions")])
def test_view_snapshot(snap_compare, replay_app, key, name):
    async def before(pilot):
        if key in "2345":
            await pilot.press("P")
        await pilot.press(key)
        await settle(pilot)

    assert snap_compare(replay_app, terminal_size=SIZE, run_before=before)


def test_inspector_drilldown_snapshot(snap_compare, replay_app):
    async def before(pilot):
        await pilot.press("P", "6", "greater_than_sign", "down", "down", "e", "e", "u")
        await settle(pilot)

    assert snap_compare(replay_app, terminal_size=SIZE, run_before=before)


@pytest.fixture
def ranks_app(tmp_path, monkeypatch):
    """The app replaying the rank recordings of a 2-rank CPU run (slab and dense) as one run per backend."""
    from tui_rank_fixtures import copy_rank_dir

    directory = copy_rank_dir(tmp_path)
    for index, path in enumerate(sorted(directory.iterdir())):
        os.utime(path, (1_700_000_000 + index,) * 2)
    monkeypatch.chdir(tmp_path)
    return quiet(SlabscopeApp(AppOptions(autostart=False, open_paths=[directory.relative_to(tmp_path)],
                                         recordings_dir=directory.relative_to(tmp_path))))


@pytest.mark.parametrize("keys,name", [(("8",), "ranks"), (("1",), "memory"), (("2", "w"), "slabs-rank1")])
def test_rank_run_snapshot(snap_compare, ranks_app, keys, name):
    async def before(pilot):
        await pilot.press(*keys)
        await settle(pilot)

    assert snap_compare(ranks_app, terminal_size=(120, 40), run_before=before)


def test_memory_at_80x24_snapshot(snap_compare, replay_app):
    async def before(pilot):
        await settle(pilot)

    assert snap_compare(replay_app, terminal_size=(80, 24), run_before=before)
