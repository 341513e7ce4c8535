"""28 layers x 64 slabs (32 rows each): every view renders it; the slab grid falls back to one character per slab
at 80 columns; the inspector shows all 64 slabs of a layer. (Refresh cost is measured by
tests/tui/test_refresh_cost.py, which prints figures and asserts no speed.)"""

from __future__ import annotations

import asyncio

from tui_fixtures import FakeWorker, big_stream
from tui_helpers import settle, wait_for
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp
from app.tui.widgets.row_map import RowMap
from app.tui.widgets.slab_grid import SlabGrid


def test_28_layers_by_64_slabs_at_80x24(tmp_path):
    def factory(name, **params):
        return FakeWorker(big_stream(), per_poll=100)

    async def go():
        app = SlabscopeApp(AppOptions(backends=["slab"], worker_factory=factory, recordings_dir=tmp_path))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.store.sessions["slab"].status == "done")
            screens = {}
            for key in "1234567":
                await pilot.press(key)
                await settle(pilot)
                screens[key] = screen_text(app)
            grid, row_map = app.screen.query_one(SlabGrid), app.screen.query_one(RowMap)
            return screens, grid, row_map

    screens, grid, row_map = asyncio.run(go())
    assert grid.compact and len(grid._rows) == 28 and all(len(cells) == 64 for cells in grid._rows)
    assert "slabs 1792" in screens["2"]  # 28 x 64
    assert row_map.num_slabs == 64 and row_map.per_slab == 32
    assert "L0" in screens["3"] and "runs per sequence per decode step" in screens["4"]
