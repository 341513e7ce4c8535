"""Shared fixtures for the TUI tests: event streams, fake workers and the shipped sample recordings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def fake_factory():
    """A worker factory that replays fixture streams; records the handles it made."""
    from tui_fixtures import FakeWorker, event_stream

    made: dict[str, FakeWorker] = {}

    def factory(name: str, **params) -> FakeWorker:
        made[name] = FakeWorker(event_stream(name), per_poll=25)
        return made[name]

    factory.made = made
    return factory
