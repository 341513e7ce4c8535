"""Keys a user meets (issue 27, item 5 and finding 13): replay hides the live-only keys (x, R, L) from the footer and
says why when one is pressed; the footer fits at 80x24 and 160x48 to its last key; the run form shows each
scenario's own block and slab sizes and lists the known models."""

from __future__ import annotations

import asyncio

import pytest

from textual.widgets import Input, Select
from tui_helpers import wait_for
from tui_paths import SAMPLE_DENSE, SAMPLE_SLAB
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp
from app.tui.screens.run_form import PATH_CHOICE, RunFormScreen


def _footer(app) -> str:
    return screen_text(app).splitlines()[-1]


def _replay_app(tmp_path) -> SlabscopeApp:
    return SlabscopeApp(AppOptions(autostart=False, open_paths=[SAMPLE_SLAB, SAMPLE_DENSE],
                                   recordings_dir=tmp_path / "recs"))


def test_replay_hides_live_only_keys_and_says_why_when_pressed(tmp_path):
    """In replay the footer has no 'x stop' or 'R record', and x, R and L each answer with why they do nothing here
    (the old app listed them and did nothing, silently)."""

    async def go():
        app = _replay_app(tmp_path)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: "q quit" in _footer(app), timeout=10)
            app.clear_notifications()
            footer = _footer(app)
            said = []
            for key in ("x", "R", "L"):
                await pilot.press(key)
                await pilot.pause(0.1)
                said.append([n.message for n in app._notifications])
                app.clear_notifications()
            return footer, said, app.mode

    footer, said, mode = asyncio.run(go())
    assert mode == "REPLAY" and "stop" not in footer and "record" not in footer and "? help" in footer
    assert said == [["x stops a live run; this is a replay (n starts a live run)"],
                    ["R records a live run; this is a replay of recordings already saved (n starts a live run)"],
                    ["L returns to following a live run; this is a replay (n starts a live run)"]]


@pytest.mark.slow
def test_the_footer_fits_to_its_last_key_at_80x24_and_160x48(tmp_path, fake_factory):
    """Live (the most keys: x stop and R record too) and replay, at both sizes: the footer ends with 'q quit' (the
    old footer lost its end behind the plot's zoom keys at 160 columns and was cut at 80)."""

    async def go(size, live):
        app = SlabscopeApp(AppOptions(worker_factory=fake_factory, recordings_dir=tmp_path / "recs")) if live \
            else _replay_app(tmp_path)
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: "q quit" in _footer(app), timeout=10)
            return _footer(app)

    for size in ((80, 24), (160, 48)):
        for live in (True, False):
            footer = asyncio.run(go(size, live))
            assert footer.rstrip().endswith("q quit") and "? help  g glossary" in footer, (size, live, footer)
            assert ("x stop" in footer and "R record" in footer) == live, (size, live, footer)


def test_the_run_form_shows_each_scenarios_own_sizes_and_lists_known_models(tmp_path):
    """churn's slabs are 8 blocks: the empty field says 'scenario default (8)' (the old form said 32 for every
    scenario); picking distinct_burst says 32. The model is picked from the known models; 'a local mlx-lm
    directory' enables the path field, and an empty path is refused on Start."""

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, recordings_dir=tmp_path / "recs"))
        async with app.run_test(size=(100, 34)) as pilot:
            await pilot.press("n")
            await pilot.pause(0.2)
            form = app.screen
            assert isinstance(form, RunFormScreen)
            slab, block = form.query_one("#form-slab", Input), form.query_one("#form-block", Input)
            seen = [(block.placeholder, slab.placeholder)]
            form.query_one("#form-scenario", Select).value = "distinct_burst"
            await pilot.pause(0.1)
            seen.append((block.placeholder, slab.placeholder))
            models = form.query_one("#form-model", Select)
            options = [value for _label, value in models._options]
            path = form.query_one("#form-model-path", Input)
            path_disabled = path.disabled
            models.value = PATH_CHOICE
            await pilot.pause(0.1)
            await pilot.press("ctrl+s")
            await pilot.pause(0.1)
            error = str(form.query_one("#form-error").render())
            return seen, options, path_disabled, path.disabled, error

    seen, options, disabled_before, disabled_after, error = asyncio.run(go())
    assert seen == [("scenario default (32)", "scenario default (8)"),
                    ("scenario default (32)", "scenario default (32)")]
    assert options[:3] == ["smollm2-135m", "synthetic:qwen3-0.6b", "synthetic:tiny-llama"]
    assert options[-1] == PATH_CHOICE and disabled_before and not disabled_after
    assert "type the model directory's path" in error
