"""The first screen tells the truth (issue 27, item 2): the README's replay command opens at the end of the sessions
on the whole-run verdict that ``slabscope compare`` prints for the same files; the figure up to the cursor is
labelled "at cursor" and drawn neutral; memory is never drawn negative; healthy runs are never drawn in the error
colour, in any view."""

from __future__ import annotations

import asyncio
import re

import pytest

from textual.widgets import Static
from tui_paths import SAMPLE_DENSE, SAMPLE_SLAB, SAMPLE_DIR
from tui_helpers import settle
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp
from app.tui.widgets.accounting_bar import AccountingBar
from app.tui.widgets.palette import ERROR_HEXES, ERROR_STYLE, NEUTRAL_STYLE, OK_STYLE
from probes.compare import compare_sessions
from probes import figures
from probes.replay import Session

GPU = SAMPLE_DIR / "gpu"
README_FILES = [GPU / f"distinct_burst-{b}.slabrec" for b in ("slab", "dense", "monolithic")]
NEGATIVE_BYTES = re.compile(r"-\s?\d[\d.,]*\s?(B|KiB|MiB|GiB)\b")


def test_the_figures_are_compares_all_rows():
    """``probes.figures`` gives the numbers ``compare`` prints in its ``all`` rows (footprint ratio to dense, busy
    tok/s): the first screen's verdict is compare's. A tok/s over decode steps only, or a ratio of the peaks up to
    some instant, fails here."""
    sessions = [Session.open(p) for p in README_FILES]
    rows = {row.session: row for row in compare_sessions(sessions, baseline=1) if row.phase == "all"}
    slab, dense, mono = sessions
    ratio = lambda s: figures.footprint_ratio(figures.peak_footprint(s), figures.peak_footprint(dense))  # noqa: E731
    assert ratio(slab) == rows["slab"].footprint_ratio and ratio(mono) == rows["monolithic"].footprint_ratio
    busy = [rows[k].tokens_per_s for k in ("slab", "dense", "monolithic")]
    assert [figures.tok_s(s, "busy") for s in sessions] == busy
    assert f"{rows['slab'].footprint_ratio:.2f}" == "0.54"  # the README's figure


def _line(app, selector: str) -> Static:
    return app.screen.query_one(selector, Static)


def test_the_readme_replay_opens_at_the_end_on_compares_verdict():
    """Opened as the README says, the replay stands at the end; the verdict line reads compare's 0.54x within the
    gate; after P (slab's peak, its admission-time reserve at 0.1 s) the verdict is unchanged and the 3.01x up to
    that instant sits on the "at cursor" line in grey, with no negative memory under it. Opening at the peak (the
    old cursor), or computing the verdict up to the cursor, fails here."""

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=list(README_FILES)))
        async with app.run_test(size=(160, 48)) as pilot:
            await settle(pilot)
            out = {"cursor": app.cursor, "end": app.store.duration(), "first": screen_text(app)}
            await pilot.press("P")
            await settle(pilot)
            out["peak_cursor"], out["at_peak"] = app.cursor, screen_text(app)
            out["cursor_line"] = _line(app, "#cursor-line").content
            out["bars"] = str(app.screen.query_one(AccountingBar).render())
        return out

    out = asyncio.run(go())
    assert out["cursor"] == out["end"] > 3.9
    first = out["first"]
    assert "whole run: slab/dense" in first and "0.54x (gate 1.15x ok)" in first and "0.89x (gate 1.15x ok)" in first
    assert "EXCEEDED" not in first and "at cursor t=4.0s" in first
    assert out["peak_cursor"] < 0.2
    at_peak = out["at_peak"]
    assert "0.54x (gate 1.15x ok)" in at_peak and "EXCEEDED" not in at_peak
    assert "at cursor t=0.1s (peaks since start): slab/dense 3.01x" in at_peak
    line = out["cursor_line"]  # grey; no gate colour on any part of it (the backend names keep theirs)
    assert line.style == NEUTRAL_STYLE and not {span.style for span in line.spans} & {ERROR_STYLE, OK_STYLE}
    assert not NEGATIVE_BYTES.search(out["bars"]), out["bars"]  # slab's "other active" is -132 MiB there
    assert "weights + pool count 132 MiB more than MLX holds active" in out["bars"]


@pytest.mark.slow
def test_healthy_runs_are_never_drawn_in_the_error_colour():
    """Every view of healthy recordings (the H200 burst at its end and at slab's peak; the CPU churn sample, whose
    slabs fill and whose RSS MLX does not explain) is rendered and searched for the error colour. A full slab drawn
    red, unexplained RSS in red, gather decisions or the worst gather run in the error style fail here."""

    async def go(paths, keys):
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=paths))
        found = []
        async with app.run_test(size=(140, 44)) as pilot:
            for key in keys:
                await pilot.press(key)
                if key.isdigit():
                    app.clear_notifications()
                    app.refresh_views()
                    await settle(pilot)
                    svg = app.export_screenshot()
                    found += [(key, h) for h in ERROR_HEXES if h in svg]
        return found

    keys = ["1", "2", "3", "4", "5", "6", "e", "7", "P", "1", "2", "4"]
    gpu = asyncio.run(go(list(README_FILES), keys))
    cpu = asyncio.run(go([SAMPLE_SLAB, SAMPLE_DENSE], keys))
    # a run whose layers gathered while their kernels compiled (112 declines): a decline is a choice, not a failure
    compiling = asyncio.run(go(sorted((GPU / "nccl2").glob("distinct_burst-slab-rank*.slabrec")), ["5", "P", "5"]))
    assert not gpu and not cpu and not compiling, (gpu, cpu, compiling)
