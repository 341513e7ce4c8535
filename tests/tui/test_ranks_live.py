"""A live distributed run started from the TUI's run form: ``slabscope record --ranks 2`` in the background (mlx.launch,
ring backend, two CPU ranks of a tiny llama), its rank recordings followed while they grow, the same views; a rank
killed mid-run is shown at once and never waited on; quitting leaves no process of the run behind. One real launch
serves every check (each launch costs seconds of two processes loading mlx)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import psutil
import pytest
from textual.widgets import Input
from tui_helpers import settle, wait_for
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp
from app.workloads.spec import PoolChoice
from app.workloads.launch import live_pids
from probes.ranks import imbalance_rows
from probes.replay import Session

pytestmark = pytest.mark.slow
MODEL = "synthetic:tiny-llama"
LONG = ("--set", "n=400",)


def run(coro):
    return asyncio.run(coro)


def make_app(tmp_path, rank_args, **kw) -> SlabscopeApp:
    return SlabscopeApp(AppOptions(model=MODEL, pool=PoolChoice(8, 4), recordings_dir=tmp_path / "recs",
                                   rank_args=rank_args, **kw))


def growing(app) -> bool:
    """Some rank session holds samples while its recording is still being written."""
    return any(len(m.samples) and getattr(m, "growing", False) for m in app.store.sessions.values())


def _tree(pid: int) -> list:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _gone(processes: list) -> bool:
    return live_pids(processes) == []


def test_form_starts_a_distributed_run_followed_live_a_killed_rank_shown_and_quitting_stops_every_rank(tmp_path):
    """One real 2-rank launch, driven as a person does. The run form starts ``record --ranks 2`` (slab, then
    dense): the rank sessions show while their files grow. Rank 1 of slab is SIGKILLed: the TUI marks it at once
    (its pid is gone, its file has no end) and never waits on it; rank 0 stops with the ring's error (or the
    launcher's SIGTERM) and record goes on to dense. Quitting mid-dense stops record, mlx.launch and both dense
    ranks (none is left), and every followed session holds what its file holds."""
    async def go():
        app = make_app(tmp_path, LONG, autostart=False, backends=["slab", "dense"])
        async with app.run_test(size=(130, 44)) as pilot:
            await pilot.press("n")
            await settle(pilot)
            app.screen.query_one("#form-ranks", Input).value = "2"
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: growing(app) and "slab r1" in app.store.sessions
                           and len(app.store.sessions["slab r1"].samples) >= 3, step=0.02)
            seen_live = {label: len(m.samples) for label, m in app.store.sessions.items()}
            await settle(pilot)
            live_text = screen_text(app)
            r1 = app.store.sessions["slab r1"]
            os.kill(r1.meta["distributed"]["pid"], signal.SIGKILL)
            await wait_for(pilot, lambda: r1.error is not None)
            r0 = app.store.sessions["slab r0"]
            await wait_for(pilot, lambda: r0.status != "running")
            await pilot.press("8")
            await settle(pilot)
            ranks_text = screen_text(app)
            await wait_for(pilot, lambda: "dense r1" in app.store.sessions
                           and len(app.store.sessions["dense r1"].samples) >= 2)
            tree = _tree(app.controller.ranks.process.pid)
            names = sorted(p.name() for p in tree)
            await pilot.press("q")
            return app, seen_live, live_text, ranks_text, tree, names

    app, seen_live, live_text, ranks_text, tree, names = run(go())
    deadline = time.monotonic() + 60  # bounds a hang: quitting has stopped the run's processes (or it has not)
    while not _gone(tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(tree), f"left behind: {live_pids(tree)}"
    assert len(tree) == 4 and "mlx.launch" in names  # record, the launcher, two dense ranks
    ranks = app.controller.ranks  # the TUI stopped record with SIGTERM; record stopped its ranks and said so
    assert ranks.process.returncode == 128 + signal.SIGTERM
    said = "slabscope record: stopped by SIGTERM: every rank was stopped, no further backend started"
    deadline = time.monotonic() + 60  # the output reader thread reads record's last lines
    while said not in ranks.output and time.monotonic() < deadline:
        time.sleep(0.05)
    assert said in ranks.output, list(ranks.output)[-10:]
    assert app.mode == "LIVE" and "LIVE" in live_text and "slab r0" in live_text
    assert set(app.store.sessions) == {"slab r0", "slab r1", "dense r0", "dense r1"}
    assert [r.label for r in app.store.runs] == ["slab", "dense"]
    r0, r1 = app.store.sessions["slab r0"], app.store.sessions["slab r1"]
    assert "ended without closing its recording" in r1.error.text and not r1.complete
    # rank 0 stopped and recorded why: the ring's error on its lost peer, or mlx.launch's SIGTERM when it saw rank 1
    # die first (which arrives first is a race between the socket and the launcher; either is right)
    error = r0.summary.summary.get("error") or ""
    assert r0.complete and ("peer" in error or "mlx.launch stopped every rank when one failed" in error), error
    assert "slab: 2 ranks via mlx.launch (ring)" in ranks_text and "slab r1 ✗ rank process" in ranks_text
    row = imbalance_rows(app.store.runs[0])[0]
    assert f"{row.imbalance:.3f}" in ranks_text  # the merged row, from the followed sessions
    out = app.controller.ranks.out
    for label, model in app.store.sessions.items():  # followed to the end: what each file holds
        backend, rank = label.split(" r")
        on_disk = Session.open(out / f"churn-{backend}-rank{rank}.slabrec")
        assert model.samples.window().footprint == on_disk.samples.window().footprint, label
        assert seen_live.get(label, 0) <= len(on_disk.samples)
    for rank in (0, 1):  # the dense ranks closed their recordings with why they stopped
        dense = Session.open(out / f"churn-dense-rank{rank}.slabrec")
        assert dense.complete and "SIGTERM" in dense.summary.summary["error"]
