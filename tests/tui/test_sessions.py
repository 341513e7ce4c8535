"""Sessions view: listing a directory of recordings (and unreadable files), opening one, comparing two."""

from __future__ import annotations

import asyncio
import os
import shutil

from tui_helpers import settle, wait_for
from tui_paths import SAMPLE_DENSE, SAMPLE_SLAB
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp
from app.tui.sources import list_recordings, load_recording


def recs_dir(tmp_path):
    recs = tmp_path / "recs"
    recs.mkdir()
    for index, src in enumerate((SAMPLE_DENSE, SAMPLE_SLAB)):
        shutil.copyfile(src, recs / src.name)
        os.utime(recs / src.name, (1_700_000_000 + index,) * 2)
    (recs / "notes.txt").write_text("not a recording")
    (recs / "broken.slabrec").write_bytes(SAMPLE_SLAB.read_bytes()[:40])  # header + a torn record
    os.utime(recs / "broken.slabrec", (1_600_000_000,) * 2)  # oldest: listed last
    return recs


def test_listing_recognises_recordings_by_content(tmp_path):
    infos = list_recordings(recs_dir(tmp_path))
    assert [i.path.name for i in infos] == ["sample-churn-slab.slabrec", "sample-churn-dense.slabrec",
                                            "broken.slabrec"]
    slab = infos[0]
    assert (slab.backend, slab.scenario, slab.model, slab.complete) == ("slab", "churn", "smollm2-135m", True)
    assert slab.duration > 5
    broken = infos[2]
    assert broken.error or not broken.complete  # listed, with its one-line problem or as unfinished


def test_loaded_recording_matches_the_session():
    from probes.replay import Session

    model = load_recording(SAMPLE_SLAB)
    session = Session.open(SAMPLE_SLAB)
    assert isinstance(model, Session) and model.label == "slab"  # the read model itself: nothing copied
    assert model.samples.window().footprint == session.samples.window().footprint
    t = model.peak().t
    assert model.snapshot_at(t) == session.snapshot_at(t) and model.snapshot_at(t).seq_rows
    assert model.overhead.cost_fraction > 0


def test_open_and_compare_from_the_sessions_view(tmp_path):
    recs = recs_dir(tmp_path)

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, recordings_dir=recs))
        async with app.run_test(size=(110, 32)) as pilot:
            await pilot.press("7")
            await settle(pilot)
            listing = screen_text(app)
            await pilot.press("m", "down", "m", "c")
            await wait_for(pilot, lambda: app.mode == "REPLAY", timeout=10)
            app.clear_notifications()
            await settle(pilot)
            return app, listing, screen_text(app)

    app, listing, compared = asyncio.run(go())
    assert "sample-churn-slab.slabrec" in listing and "notes.txt" not in listing
    assert set(app.store.sessions) == {"slab", "dense"}
    row = next(line for line in compared.splitlines() if line.strip().startswith("slab ") and "MiB" in line)
    assert "x" in row.split("MiB")[2]  # the ratio column against the dense session


def test_unreadable_recording_is_reported_not_fatal(tmp_path):
    bad = tmp_path / "bad.slabrec"
    bad.write_bytes(b"SLABSCOPEREC" + b"\x00" * 30)

    async def go():
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=[bad], recordings_dir=tmp_path))
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(pilot)
            return app, [n.message for n in app._notifications]

    app, messages = asyncio.run(go())
    assert app.mode == "IDLE" and app.store.sessions == {}
    assert any("cannot open" in m and "bad.slabrec" in m for m in messages)
