"""A user's guide (issue 27, item 4): the glossary opens from ``?``, from the key ``g`` in every view and from the
"g glossary" link in every view's legend, at that view's terms; the README's "Reading the dashboard" section has a
screenshot of every view, and its glossary is the one the dashboard shows (``app.tui.glossary``)."""

from __future__ import annotations

import asyncio
import re

import pytest

from tui_helpers import wait_for
from tui_paths import ROOT, SAMPLE_DENSE, SAMPLE_SLAB
from tui_screen_text import screen_text

from app.tui import glossary
from app.tui.app import AppOptions, SlabscopeApp
from app.tui.screens.glossary import GlossaryScreen
from app.tui.screens.help import HelpScreen

VIEWS = {"1": "memory", "2": "slabs", "3": "frag", "4": "gather", "5": "fused", "6": "inspect", "7": "sessions",
         "8": "ranks"}


def _link(app) -> tuple[int, int]:
    """Screen offset of the "g glossary" link in the visible view (the footer's key is not it)."""
    lines = screen_text(app).splitlines()[:-1]
    for row, line in enumerate(lines):
        if "g glossary" in line:
            return line.index("g glossary") + 2, row
    raise AssertionError("no glossary link on screen:\n" + "\n".join(lines))


async def _opened(pilot, app) -> str:
    await wait_for(pilot, lambda: isinstance(app.screen, GlossaryScreen), timeout=10)
    topic = app.screen.topic
    await pilot.press("escape")
    await wait_for(pilot, lambda: not isinstance(app.screen, GlossaryScreen), timeout=10)
    return topic


@pytest.mark.slow
def test_the_glossary_opens_from_help_the_key_and_every_views_legend(tmp_path):
    """For every view a click on its legend's "g glossary" link opens the glossary at that view's terms, scrolled
    there; the key g does the same (tried on two views); from the help screen g opens it too. A view without the
    link, or a glossary that opens at the top whatever the view, fails here."""

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=[SAMPLE_SLAB, SAMPLE_DENSE],
                                      recordings_dir=tmp_path))
        by_key, by_link, scrolled = {}, {}, {}
        async with app.run_test(size=(120, 40)) as pilot:
            for key, topic in VIEWS.items():
                await pilot.press(key)
                app.refresh_views()
                await pilot.pause(0.1)
                await pilot.click(offset=_link(app))
                await wait_for(pilot, lambda: isinstance(app.screen, GlossaryScreen), timeout=10)
                await pilot.pause(0.1)
                body, section = app.screen.query_one("#glossary-body"), app.screen.query_one(f"#glossary-{topic}")
                scrolled[topic] = body.scroll_y == min(body.max_scroll_y, section.virtual_region.y)
                by_link[topic] = await _opened(pilot, app)
                if key in ("2", "8"):
                    await pilot.press("g")
                    by_key[topic] = await _opened(pilot, app)
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), timeout=10)
            help_text = screen_text(app)
            await pilot.press("g")
            from_help = await _opened(pilot, app)
        return by_key, by_link, scrolled, help_text, from_help

    by_key, by_link, scrolled, help_text, from_help = asyncio.run(go())
    assert by_link == {topic: topic for topic in VIEWS.values()} and by_key == {"slabs": "slabs", "ranks": "ranks"}
    assert all(scrolled.values()), scrolled
    assert "g: the glossary" in help_text and from_help == "ranks"


def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_the_readme_reads_the_dashboard_view_by_view_with_the_dashboards_glossary():
    """'Reading the dashboard' shows a screenshot of every view (files that exist) and says what its figures mean;
    its glossary is ``python -m app.tui.glossary``, word for word (a term changed in one place only fails here)."""
    guide = _readme_section("Reading the dashboard")
    shots = re.findall(r"!\[[^\]]*\]\((docs/screenshots/[^)]+)\)", guide)
    assert all((ROOT / shot).is_file() for shot in shots), shots
    for view in ("Memory", "Slabs", "Fragmentation", "Gather", "Fused", "Inspector", "Sessions", "Ranks",
                 "Glossary"):
        assert re.search(rf"### {view}\b", guide), view
    for name in ("first-screen", "slabs", "fragmentation", "gather", "fused", "inspector", "sessions", "ranks",
                 "glossary", "web"):
        assert any(name in shot for shot in shots), name
    assert glossary.markdown() in guide
