"""The Sessions view browses folders (issue 27, finding 6): opened on a shipped H200 recording, a user walks to
``gpu/nccl2/`` (a distributed run), back up, into ``v1-h200/`` and opens a recording there, with no restart."""

from __future__ import annotations

import asyncio
import shutil

from textual.widgets import DataTable
from tui_helpers import wait_for
from tui_paths import SAMPLE_DIR
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp


def _rows(app) -> list[str]:
    table = app.screen.query_one("#sessions-list", DataTable)
    return [str(table.get_row_at(i)[1]) for i in range(table.row_count)]


async def _enter(pilot, app, name: str) -> None:
    """Highlight the row called ``name`` and press Enter."""
    table = app.screen.query_one("#sessions-list", DataTable)
    table.move_cursor(row=_rows(app).index(name))
    table.focus()
    await pilot.press("enter")


def test_sessions_walk_into_subfolders_and_up_and_open_there(tmp_path, monkeypatch):
    shipped = tmp_path / "recordings"
    shutil.copytree(SAMPLE_DIR, shipped)
    monkeypatch.chdir(tmp_path)

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=[shipped / "gpu" / "distinct_burst-slab.slabrec"],
                                      recordings_dir=shipped / "gpu"))
        seen = {}
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("7")
            await wait_for(pilot, lambda: "nccl2/" in _rows(app), timeout=10)
            seen["gpu"] = _rows(app)
            await _enter(pilot, app, "nccl2/")
            await wait_for(pilot, lambda: "distinct_burst-slab-rank1.slabrec" in _rows(app), timeout=10)
            seen["nccl2"], seen["header"] = _rows(app), screen_text(app)
            await pilot.press("backspace")
            await wait_for(pilot, lambda: "nccl2/" in _rows(app), timeout=10)
            await _enter(pilot, app, "..")
            await wait_for(pilot, lambda: "v1-h200/" in _rows(app), timeout=10)
            seen["top"] = _rows(app)
            await _enter(pilot, app, "v1-h200/")
            await wait_for(pilot, lambda: "distinct_burst-dense.slabrec" in _rows(app), timeout=10)
            await _enter(pilot, app, "distinct_burst-dense.slabrec")
            await wait_for(pilot, lambda: app.store.sessions and next(iter(app.store.sessions.values())).source
                           .endswith("v1-h200/distinct_burst-dense.slabrec"), timeout=10)
            seen["mode"] = app.mode
        return seen

    seen = asyncio.run(go())
    assert seen["gpu"][:2] == ["..", "nccl2/"] and "distinct_burst-monolithic.slabrec" in seen["gpu"]
    assert seen["nccl2"][0] == ".." and "recordings in recordings/gpu/nccl2/" in seen["header"]
    assert seen["top"][:3] == ["..", "gpu/", "v1-h200/"] and "sample-churn-slab.slabrec" in seen["top"]
    assert seen["mode"] == "REPLAY"
