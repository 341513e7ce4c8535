"""A live distributed run started from the TUI's run form: ``slabscope record --ranks 2`` in the background (mlx.launch,
ring backend, two CPU ranks of a tiny llama), its rank recordings followed while they grow, the same views; a rank
killed mid-run is shown at once and never waited on; quitting leaves no process of the run behind."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import psutil
import pytest
from textual.widgets import Input
from tui_helpers import wait_for
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp
from app.workloads.launch import live_pids
from probes.ranks import imbalance_rows
from probes.replay import Session

pytestmark = pytest.mark.slow
MODEL = "synthetic:tiny-llama"
SMALL = ("--set", "n=6", "--set", "prompt_max=96", "--set", "gen_max=24", "--set", "concurrency=3")
LONG = ("--set", "n=400",)


def run(coro):
    return asyncio.run(coro)


def make_app(tmp_path, rank_args, **kw) -> SlabscopeApp:
    return SlabscopeApp(AppOptions(model=MODEL, block_size=8, slab_blocks=4, recordings_dir=tmp_path / "recs",
                                   rank_args=rank_args, **kw))


def growing(app) -> bool:
    """Some rank session holds samples while its recording is still being written."""
    return any(len(m.samples) and getattr(m, "growing", False) for m in app.store.sessions.values())


def test_form_starts_a_distributed_run_followed_live(tmp_path):
    async def go():
        app = make_app(tmp_path, SMALL, autostart=False, backends=["slab", "dense"])
        async with app.run_test(size=(130, 44)) as pilot:
            await pilot.press("n")
            await pilot.pause(0.2)
            app.screen.query_one("#form-ranks", Input).value = "2"
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: growing(app), timeout=120, step=0.02)
            seen_live = {label: len(m.samples) for label, m in app.store.sessions.items()}
            app.refresh_views()
            await pilot.pause(0.05)
            live_text = screen_text(app)
            await wait_for(pilot, lambda: app.controller.ranks.done, timeout=180)
            await pilot.press("8")
            app.refresh_views()
            await pilot.pause(0.3)
            return app, seen_live, live_text, screen_text(app)

    app, seen_live, live_text, ranks = run(go())
    assert app.mode == "LIVE" and "LIVE" in live_text and "slab r0" in live_text
    assert set(app.store.sessions) == {"slab r0", "slab r1", "dense r0", "dense r1"}
    out = app.controller.ranks.out
    files = sorted(p.name for p in out.glob("*.slabrec"))
    assert files == ["churn-dense-rank0.slabrec", "churn-dense-rank1.slabrec", "churn-slab-rank0.slabrec",
                     "churn-slab-rank1.slabrec"]
    for label, model in app.store.sessions.items():  # followed to the end: what the files hold, complete
        backend, rank = label.split(" r")
        on_disk = Session.open(out / f"churn-{backend}-rank{rank}.slabrec")
        assert model.complete and model.error is None
        assert model.samples.window().footprint == on_disk.samples.window().footprint
        assert seen_live.get(label, 0) <= len(on_disk.samples)
    assert [r.label for r in app.store.runs] == ["slab", "dense"]
    assert "slab: 2 ranks via mlx.launch (ring)" in ranks and "r1 ✓" in ranks
    row = imbalance_rows(app.store.runs[0])[0]
    assert f"{row.imbalance:.3f}" in ranks  # the merged row, from the followed sessions
    assert "ranks via mlx.launch (ring): ok" in "\n".join(app.controller.ranks.output)


def _tree(pid: int) -> list:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def test_a_killed_rank_is_shown_and_quitting_stops_every_rank(tmp_path):
    """Rank 1 of slab is SIGKILLed: the TUI says so within seconds (its pid is gone, its file has no end) and rank 0
    stops with the ring's error; record goes on to dense; quitting then stops record, mlx.launch and both dense
    ranks: none is left."""
    async def go():
        app = make_app(tmp_path, LONG, ranks=2, backends=["slab", "dense"])
        async with app.run_test(size=(130, 44)) as pilot:
            await wait_for(pilot, lambda: "slab r1" in app.store.sessions
                           and len(app.store.sessions["slab r1"].samples) >= 3, timeout=120)
            r1 = app.store.sessions["slab r1"]
            os.kill(r1.meta["distributed"]["pid"], signal.SIGKILL)
            killed = time.monotonic()
            await wait_for(pilot, lambda: r1.error is not None, timeout=10)
            noticed = time.monotonic() - killed
            r0 = app.store.sessions["slab r0"]
            await wait_for(pilot, lambda: r0.status != "running", timeout=60)
            app.refresh_views()
            await pilot.pause(0.2)
            status = screen_text(app)
            await wait_for(pilot, lambda: "dense r1" in app.store.sessions
                           and len(app.store.sessions["dense r1"].samples) >= 2, timeout=120)
            tree = _tree(app.controller.ranks.process.pid)
            names = sorted(p.name() for p in tree)
            start = time.monotonic()
            await pilot.press("q")
            return app, noticed, status, tree, names, time.monotonic() - start

    app, noticed, status, tree, names, quit_s = run(go())
    r0, r1 = app.store.sessions["slab r0"], app.store.sessions["slab r1"]
    assert noticed < 5 and "ended without closing its recording" in r1.error.text
    assert r0.complete and "peer" in (r0.summary.summary.get("error") or "")
    assert "slab r1 ✗ rank process" in status
    assert len(tree) == 4 and "mlx.launch" in names  # record, the launcher, two dense ranks
    time.sleep(0.5)
    assert live_pids(tree) == [], f"left behind: {live_pids(tree)}"
    assert quit_s < 15
    for rank in (0, 1):  # the dense ranks closed their recordings with why they stopped
        dense = Session.open(app.controller.ranks.out / f"churn-dense-rank{rank}.slabrec")
        assert dense.complete and "SIGTERM" in dense.summary.summary["error"]
