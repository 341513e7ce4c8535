"""Widget render tests: each widget mounted alone, fed plain data, its rendered text checked."""

from __future__ import annotations

import asyncio

from tui_fixtures import SimPool
from tui_screen_text import screen_text
from textual.app import App

from app.tui.analysis import AccountingPart
from app.tui.widgets.accounting_bar import AccountingBar
from app.tui.widgets.hbars import HBars
from app.tui.widgets.lane import Lane
from app.tui.widgets.memory_chart import ChartData, MemoryChart, Series, decimate
from app.tui.widgets.palette import human_bytes, occupancy_glyph
from app.tui.widgets.row_map import RowMap
from app.tui.widgets.scrubber import Scrubber
from app.tui.widgets.slab_grid import SlabGrid
from pool import FusedDecision, LayerSnapshot, PoolCounters, PoolSnapshot, PoolStats


class Harness(App):
    def __init__(self, widget) -> None:
        super().__init__()
        self.widget = widget
        self.messages: list = []

    def compose(self):
        yield self.widget

    def on_scrubber_seek(self, message) -> None:
        self.messages.append(message.t)

    def on_row_map_slab_picked(self, message) -> None:
        self.messages.append(message.slab)


def render(widget, feed, size=(60, 12)) -> str:
    async def go() -> str:
        app = Harness(widget)
        async with app.run_test(size=size) as pilot:
            feed(widget)
            await pilot.pause()
            return screen_text(app)

    return asyncio.run(go())


def big_snapshot(layers=28, slabs=64, per=4) -> PoolSnapshot:
    rows = slabs * per
    owners = [(r // 7) % 5 if r % 3 else -1 for r in range(rows)]
    refs = [0 if o == -1 else (2 if r % 11 == 0 else 1) for r, o in enumerate(owners)]
    lay = LayerSnapshot(num_chunks=slabs, capacity_rows=rows, free_rows=0, holes=0, largest_free_run=0,
                        fragmentation=0.0, gather_runs_hist={}, fused=FusedDecision(False, "-"))
    return PoolSnapshot(design="slab", block_size=16, slab_blocks=per, num_layers=layers, dtype=None, n_kv_heads=None,
                        head_dim=None, bytes_per_row=0, stats=PoolStats(0, 0, 0, 0, 0, 0, 0),
                        counters=PoolCounters(), layers=[lay] * layers, seq_rows={}, row_owner=owners,
                        row_refcount=refs)


def test_slab_grid_wide_cells_and_totals_per_layer():
    pool = SimPool(num_layers=2, slab_blocks=4)
    pool.add(1, 3)
    pool.add(2, 3, share_from=1, shared=1)
    grid = SlabGrid()
    text = render(grid, lambda w: w.show(pool.snapshot()))
    assert not grid.compact
    lines = [line for line in text.splitlines() if line.startswith("L")]
    assert lines == ["L0    ██s▂▂", "L1    ██s▂▂"]  # slab 0 full with a shared row, slab 1 one row of four


def test_slab_grid_turns_compact_when_narrow_28x64():
    grid = SlabGrid()
    text = render(grid, lambda w: w.show(big_snapshot()), size=(80, 32))
    assert grid.compact
    rows = [line for line in text.splitlines() if line.startswith("L")]
    assert len(rows) == 28 and len(rows[0]) == 6 + 64  # one character per slab


def test_slab_grid_without_snapshot_says_so():
    assert "no pool snapshot yet" in render(SlabGrid(), lambda w: w.show(None))


def test_row_map_glyphs_selection_and_click():
    row_map = RowMap()
    owners, refs = [1, 1, -1, 2, -2, 2, -1, -3], [1, 2, 0, 1, 1, 1, 0, 1]
    text = render(row_map, lambda w: w.show(owners, refs, 4, 2, slab=1, seq=2, free_run=(6, 1), cow_rows={3}))
    # an older recording's caller-held row (-3) is held ("h"), never live
    assert text.splitlines()[:2] == [" s0  1◆·2", "▶s1  h2░h"]


def test_row_map_keys_pick_slabs():
    async def go():
        row_map = RowMap()
        app = Harness(row_map)
        async with app.run_test(size=(40, 6)) as pilot:
            row_map.show([1] * 12, [1] * 12, 4, 3, slab=0, seq=None, free_run=None, cow_rows=set())
            row_map.focus()
            await pilot.press("up")
            await pilot.click(RowMap, offset=(3, 1))
            await pilot.pause()
            return app.messages

    assert asyncio.run(go()) == [2, 1]  # up from slab 0 wraps to the last slab; the click picks line 1


def test_hbars_highlight_worst():
    text = render(HBars(), lambda w: w.show("runs", [("1", 10), ("2", 5), ("4", 1)], highlight="4"))
    assert text.splitlines()[0] == "runs"
    assert "◀ worst" in text.splitlines()[3] and "◀ worst" not in text.splitlines()[1]


def test_lane_places_marks_in_time():
    text = render(Lane(), lambda w: w.show(10.0, {"declines": [(0.0, "✗", ""), (10.0, "✗", "")]}, cursor=5.0),
                  size=(48, 4))
    lane = text.splitlines()[1]
    assert lane.startswith("declines ")
    body = lane[9:]
    assert body[0] == "✗" and body[-1] == "✗" and body[len(body) // 2 - 1:len(body) // 2 + 1].count("┃") == 1


def test_scrubber_shows_position_and_seeks_on_click():
    async def go():
        scrub = Scrubber()
        app = Harness(scrub)
        async with app.run_test(size=(58, 3)) as pilot:
            scrub.show(10.0, 5.0, peak=9.0)
            await pilot.pause()
            text = screen_text(app).splitlines()[0]
            await pilot.click(Scrubber, offset=(0, 0))
            await pilot.pause()
            return text, app.messages

    text, messages = asyncio.run(go())
    assert "●" in text and "▲" in text and "5.0s/ 10.0s" in text
    assert messages == [0.0]


def test_accounting_bar_totals_and_legend():
    parts = [AccountingPart("weights", 512 * 1024 * 1024), AccountingPart("pool live", 512 * 1024 * 1024)]
    text = render(AccountingBar(), lambda w: w.show([("slab", parts)]), size=(70, 4))
    assert "slab" in text and "1 GiB" in text and "pool live" in text


def test_memory_chart_draws_series_and_cursor():
    chart = MemoryChart()
    data = ChartData([Series("slab act+cache", [0, 1, 2], [1 << 20, 3 << 20, 2 << 20], "#3b9ae1", peak=(1, 3 << 20))],
                     phase_starts=[0.5], cursor=1.5)
    text = render(chart, lambda w: w.draw(data), size=(60, 14))
    assert "▲" in text and "slab act+cache" in text and chart.last is data


def test_helpers():
    assert decimate(list(range(10)), [0, 9, 0, 0, 0, 0, 0, 0, 7, 0], 2) == ([1, 8], [9, 7])  # peaks survive
    assert occupancy_glyph(0)[0] == "·" and occupancy_glyph(1)[0] == "█" and occupancy_glyph(0.5)[0] not in "·█"
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(12) == "12 B"
