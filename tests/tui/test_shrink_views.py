"""The Slabs and Memory views of a session whose shrink points gave slabs back and moved blocks: released slabs,
moved blocks and the latest shrink in the Slabs view's totals, a lane of shrink points and the bytes reclaimed in
the Memory view (a scripted compacting pool recorded by the probes in a subprocess: this process stays mlx-free)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from tui_helpers import wait_for
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp
from probes.events import Shrunk
from probes.replay import Session

ROOT = Path(__file__).resolve().parents[2]
RECORD = ("import sys; sys.path.insert(0, 'tests/probes'); from probes_scripted import record_scripted; "
          "from pool import ShrinkPolicy; "
          "record_scripted(sys.argv[1], steps=80, seed=3, shrink=ShrinkPolicy('compact', 1 << 30, 1.0))")


@pytest.fixture(scope="module")
def compacted(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shrink") / "compact-slab.slabrec"
    subprocess.run([sys.executable, "-c", RECORD, str(path)], check=True, cwd=ROOT, timeout=120)
    return path


def test_slabs_and_memory_views_show_what_shrink_gave_back(compacted, tmp_path):
    session = Session.open(compacted)
    events = session.events_of(Shrunk)
    final = session.snapshots[-1].snapshot.counters
    assert events and final.slab_releases and final.blocks_moved

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=[compacted], recordings_dir=tmp_path))
        out = {}
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: app.mode == "REPLAY", timeout=10)
            app.cursor = session.duration
            await pilot.press("2")
            await wait_for(pilot, lambda: "shrink released" in screen_text(app), timeout=10)
            out["slabs"] = screen_text(app)
            await pilot.press("1")
            await wait_for(pilot, lambda: "reclaimed" in str(app.screen.query_one("MemoryView").border_subtitle),
                           timeout=10)
            out["memory"] = screen_text(app)
            out["caption"] = str(app.screen.query_one("MemoryView").border_subtitle)
        return out

    out = asyncio.run(go())
    assert f"released {final.slab_releases} slabs" in out["slabs"]
    assert f"moved {final.blocks_moved} blocks" in out["slabs"] and "last @" in out["slabs"]
    assert "▼" in out["memory"] and "↓ " in out["memory"]
    slabs = sum(e.report.slabs_released for e in events)
    assert f"({slabs} slabs)" in out["caption"]
