"""The web view in a real browser (issue 27, item 6): ``slabscope web`` on 127.0.0.1, headless Chromium on it, the
dashboard drawn (its text arrives in the page) and reacting to keys typed into the page (the view changes, the
picture changes). Skips, saying why, only where no browser is installed (.ci/bootstrap installs one as root on
Debian)."""

from __future__ import annotations

import pytest
from tui_paths import SAMPLE_DENSE, SAMPLE_SLAB
from web_browser import WebDashboard, missing_browser

pytestmark = [pytest.mark.slow, pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser()))]


def test_the_web_dashboard_draws_and_reacts_in_a_real_browser():
    web = WebDashboard(["--open", str(SAMPLE_SLAB), "--open", str(SAMPLE_DENSE)])
    try:
        drawn = web.wait_text("whole run: slab/dense", timeout=90)
        first = web.screenshot()
        assert "0.93x (gate 1.15x ok)" in web.text() and "REPLAY" in web.text()
        web.press("2")
        # both after the key, in either order: one frame may carry the footer ahead of the view's body
        pressed = drawn
        drawn = max(web.wait_text("bytes reserved", since=pressed), web.wait_text("g glossary", since=pressed))
        slabs = web.screenshot()
        web.press("g")
        drawn = web.wait_text("slabscope glossary", since=drawn)
        web.press("q")  # closes the glossary (the dashboard's own q is for quitting: not pressed here)
        web.press("?")
        web.wait_text("slabscope keys", since=drawn)
    finally:
        output = web.close()
    assert first != slabs  # the picture in the page changed with the key
    assert "127.0.0.1" in output and "each browser tab runs its own dashboard process" in output
