"""The decline reason of a kernel still building ("kernel for N slabs compiling", issue 13) reaches the Fused view
like any other reason, per layer and in the decline counts."""

from __future__ import annotations

import asyncio

from tui_fixtures import FakeWorker, event_stream
from tui_helpers import finished, wait_for
from tui_screen_text import screen_text

from app.tui.app import AppOptions, SlabscopeApp

REASON = "kernel for 33 slabs compiling"


def test_fused_view_shows_the_compiling_reason(tmp_path):
    def stream():
        events = event_stream("slab")
        done = events.pop()
        last = events[-1]
        for layer in range(3):
            events.append({"kind": "fused", "t": last["t"], "step": last["step"], "tokens": last["tokens"],
                           "layer": layer, "use_fused": False, "reason": REASON})
        return events + [done]

    async def go():
        app = SlabscopeApp(AppOptions(backends=["slab"], worker_factory=lambda name, **p: FakeWorker(stream(),
                                                                                                  per_poll=20),
                                      recordings_dir=tmp_path))
        async with app.run_test(size=(120, 32)) as pilot:
            await wait_for(pilot, lambda: finished(app))
            await pilot.press("5")
            await wait_for(pilot, lambda: REASON in screen_text(app), timeout=10)
            return screen_text(app)

    text = asyncio.run(go())
    assert text.count(REASON) >= 3 and "layers fused 0, gather 3" in text
