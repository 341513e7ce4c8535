"""Pilot tests of the app shell and every view on a live run of fake workers (fixture streams)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tui_fixtures import FakeWorker, event_stream
from tui_helpers import finished, settle, wait_for
from tui_screen_text import screen_text
from textual.widgets import OptionList

from app.tui.app import AppOptions, SlabscopeApp
from app.tui.screens.help import HelpScreen
from app.tui.screens.run_form import RunFormScreen
from app.workloads.spec import PoolChoice

TAB_MARKERS = {"memory": "tok/s", "slabs": "rows live", "frag": "largest run", "gather": "runs per sequence per decode step",
               "fused": "L2     gather", "inspect": "sequences", "sessions": "on screen now"}
TAB_KEYS = {"memory": "1", "slabs": "2", "frag": "3", "gather": "4", "fused": "5", "inspect": "6", "sessions": "7"}


def run(coro):
    return asyncio.run(coro)


def make_app(factory, tmp_path: Path, **kw) -> SlabscopeApp:
    return SlabscopeApp(AppOptions(worker_factory=factory, recordings_dir=tmp_path / "recs", **kw))


def test_every_view_shows_the_live_run(fake_factory, tmp_path):
    async def go():
        app = make_app(fake_factory, tmp_path)
        seen = {}
        async with app.run_test(size=(100, 32)) as pilot:
            await wait_for(pilot, lambda: finished(app))
            for tab, key in TAB_KEYS.items():
                await pilot.press(key)
                await wait_for(pilot, lambda: TAB_MARKERS[tab] in screen_text(app), timeout=10)
                seen[tab] = screen_text(app)
        return app, seen

    app, seen = run(go())
    assert set(fake_factory.made) == {"slab", "dense"} and all(w.started for w in fake_factory.made.values())
    assert "slab/dense 0.87x (gate 1.15x ok)" in seen["memory"]  # (40+24+2)/(50+24+2)
    assert "busy tok/s slab 95.0" in seen["memory"] and "weights" in seen["memory"]
    assert "slabs 12  rows live 39" in seen["slabs"] and "L2" in seen["slabs"]
    assert "next request needs 10 blocks" in seen["frag"] and "L0     4      3" in seen["frag"]
    assert "runs per sequence per decode step" in seen["gather"] and "seq 2" in seen["gather"] and "◀ worst" in seen["gather"]
    assert "layer has more than one slab" in seen["fused"] and "declines" in seen["fused"]
    assert "layers fused 0, gather 3" in seen["fused"]
    assert "seq 2: 10 blocks, 6 runs" in seen["inspect"]
    assert "on screen now" in seen["sessions"]
    status = seen["memory"].splitlines()[-2]
    assert "slab ✓" in status and "dense ✓" in status and "probes: slab 1.10%" in status


def test_crashed_worker_shows_its_error(tmp_path):
    def factory(name, **params):
        crash = 30 if name == "slab" else None
        return FakeWorker(event_stream(name), per_poll=10, crash_after=crash)

    async def go():
        app = make_app(factory, tmp_path)
        async with app.run_test(size=(120, 30)) as pilot:
            await wait_for(pilot, lambda: finished(app))
            await settle(pilot)
            return app, screen_text(app)

    app, text = run(go())
    assert app.store.sessions["slab"].status == "error" and app.store.sessions["dense"].status == "done"
    assert "slab ✗ killed by signal 9 (likely out of memory)" in text


def test_quit_cancels_workers_and_returns(tmp_path):
    def slow(name, **params):
        return FakeWorker(event_stream(name, steps=2000), per_poll=1)

    async def go():
        app = make_app(slow, tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: len(app.store.sessions["slab"].samples) > 0)
            handles = dict(app.controller.handles)
            await pilot.press("q")
        return handles

    handles = asyncio.run(asyncio.wait_for(go(), timeout=20))
    assert all(h.cancelled for h in handles.values())


def test_pause_step_peak_and_back_to_live(fake_factory, tmp_path):
    async def go():
        app = make_app(fake_factory, tmp_path)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: finished(app))
            await pilot.press("space")
            states = [(app.mode, app.cursor)]
            await pilot.press("left_square_bracket", "left_square_bracket")
            states.append((app.mode, app.cursor))
            await pilot.press("right_square_bracket")
            states.append((app.mode, app.cursor))
            await pilot.press("P")
            states.append((app.mode, app.cursor))
            await pilot.press("space")
            states.append((app.mode, app.cursor))
            return states

    assert run(go()) == [("PAUSED", 12.0), ("PAUSED", 11.0), ("PAUSED", 11.5), ("PAUSED", 12.0), ("LIVE", None)]


def test_x_axis_pool_backend_and_theme_switches(fake_factory, tmp_path):
    async def go():
        app = make_app(fake_factory, tmp_path, backends=["slab", "monolithic", "dense"])
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: finished(app))
            await pilot.press("t")
            x1 = app.x_mode
            await pilot.press("t")
            x2 = app.x_mode
            await pilot.press("b")
            pool = app.frame().pool_session().label
            await pilot.press("D")
            await settle(pilot)
            return x1, x2, pool, app.theme, screen_text(app)

    x1, x2, pool, theme, text = run(go())
    assert (x1, x2, pool, theme) == ("step", "tokens", "monolithic", "textual-light")
    assert any(line.strip() == "tokens" for line in text.splitlines())  # the chart's x axis names its unit


def test_run_form_validates_then_starts_a_run(fake_factory, tmp_path):
    async def go():
        app = make_app(fake_factory, tmp_path, autostart=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("n")
            await settle(pilot)
            form = app.screen
            assert isinstance(form, RunFormScreen)
            form.query_one("#form-slab").value = "0"
            await pilot.press("ctrl+s")
            await settle(pilot)
            error = screen_text(app)
            form.query_one("#form-slab").value = "16"
            form.query_one("#form-backend-dense").value = False
            form.query_one("#form-backend-monolithic").value = True
            await pilot.click("#form-start")
            await wait_for(pilot, lambda: finished(app))
            return app, error

    app, error = run(go())
    assert "slab blocks must be a positive integer" in error
    assert set(app.store.sessions) == {"slab", "monolithic"} and app.options.pool.slab_blocks == 16


def test_help_lists_every_app_key(fake_factory, tmp_path):
    async def go():
        app = make_app(fake_factory, tmp_path, autostart=False)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.press("question_mark")
            await settle(pilot)
            shown = isinstance(app.screen, HelpScreen)
            text = screen_text(app)
            await pilot.press("escape")
            return shown, text, app.BINDINGS

    shown, text, bindings = run(go())
    assert shown
    from app.tui.keys import LONG_HELP

    for binding in bindings:
        assert LONG_HELP.get(binding.action, binding.description) in text, binding.action
    assert "next free run" in text and "mark for compare" in text


def test_inspector_drilldown_on_a_paused_live_snapshot(fake_factory, tmp_path):
    async def go():
        app = make_app(fake_factory, tmp_path)
        async with app.run_test(size=(100, 34)) as pilot:
            await wait_for(pilot, lambda: finished(app))
            await pilot.press("6", "space")
            app.cursor = 4.0  # sequence 1 was released at 4.0 s: rows 1-2 are a free run
            app.refresh_views()
            await pilot.press("e")  # first sequence
            runs = app.screen.query_one("#inspect-runs", OptionList)
            await pilot.click("#inspect-runs", offset=(3, 1))
            await settle(pilot)
            return screen_text(app), runs.option_count

    text, count = run(go())
    # at 4.0 s sequence 2 holds rows 0 (from seq 1), 3, 4 and 7, 8 (grown at steps 3, 6): slabs 0, 0, 1, 1, 2
    assert "seq 2: 5 blocks in 3 gather runs: s0x2 s1x2 s2x1" in text
    assert count == 2 and "free rows 1-2: freed by seq 1's release at 4.00s" in text


def test_the_forms_pool_choice_reaches_each_workers_run_spec(tmp_path):
    """The run form's block size, slab blocks and shrink policy travel as one ``PoolChoice`` to every worker's
    ``RunSpec`` (the real ``make_worker``, not started): a field dropped on the way fails here."""
    from app.tui import sources

    specs = {}

    def factory(name: str, **params):
        handle = sources.make_worker(name, **params)
        specs[name] = handle.spec
        return FakeWorker(event_stream(name), per_poll=25)

    async def go():
        app = make_app(factory, tmp_path, autostart=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("n")
            await settle(pilot)
            form = app.screen
            form.query_one("#form-block").value = "16"
            form.query_one("#form-slab").value = "8"
            form.query_one("#form-shrink").value = "compact"
            await pilot.click("#form-start")
            await wait_for(pilot, lambda: finished(app))
            return app

    app = run(go())
    assert app.options.pool == PoolChoice(16, 8, "compact")
    assert {name: (s.block_size, s.slab_blocks, s.shrink) for name, s in specs.items()} == \
        {"slab": (16, 8, "compact"), "dense": (16, 8, "compact")}
