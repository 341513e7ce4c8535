"""Small async helpers for Pilot tests.

Two kinds of waiting, never a sleep: ``settle`` lets the app's own event loop handle what is already queued (key
presses, a pushed screen, a posted message) and redraws the views from the store as it is now, which is all a replay
or a finished run needs; ``wait_for`` polls a condition that another thread or process makes true (an ingest thread,
a worker, a rank), with a timeout that only bounds a hang.
"""

from __future__ import annotations

import time


async def settle(pilot) -> None:
    """Process every pending message of the app and its screen, redraw the views from the store, and process the
    redraw's messages (the app's own event loop only: no other thread or process is waited on)."""
    await pilot.pause()
    pilot.app.refresh_views()
    await pilot.pause()


async def wait_for(pilot, predicate, timeout: float = 120.0, step: float = 0.05) -> None:
    """Let the app run until ``predicate()`` is true; fail the test after ``timeout`` seconds (a hang bound)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await pilot.pause(step)


def finished(app) -> bool:
    """Every session of the app reached done or error."""
    tracks = app.store.sessions.values()
    return bool(tracks) and all(t.status in ("done", "error") for t in tracks)
