"""Small async helpers for Pilot tests."""

from __future__ import annotations

import time


async def wait_for(pilot, predicate, timeout: float = 20.0, step: float = 0.05) -> None:
    """Let the app run until ``predicate()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await pilot.pause(step)


def finished(app) -> bool:
    """Every session of the app reached done or error."""
    tracks = app.store.sessions.values()
    return bool(tracks) and all(t.status in ("done", "error") for t in tracks)
