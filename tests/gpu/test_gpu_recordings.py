"""The footprint-gate recordings made on the H200 (assets/recordings/gpu/) are complete sessions that replay, show
the gate's figures, and open in the TUI."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from probes.events import FusedChange, Step
from probes.replay import Session

GPU_DIR = Path(__file__).resolve().parents[2] / "assets" / "recordings" / "gpu"
BACKENDS = ("slab", "monolithic", "dense")


def _path(backend: str) -> Path:
    return GPU_DIR / f"distinct_burst-{backend}.slabrec"


def test_gpu_recordings_are_small_complete_h200_sessions():
    assert sum(_path(b).stat().st_size for b in BACKENDS) < 2 * 2**20
    peaks = {}
    for backend in BACKENDS:
        session = Session.open(str(_path(backend)))
        assert session.complete and session.meta["backend"] == backend
        assert session.meta["device"].startswith("Device(gpu")
        assert session.meta["model"]["name"] == "synthetic:qwen3-0.6b" and session.meta["model"]["dtype"] == "bfloat16"
        steps = session.events_of(Step)
        assert sum(e.num_tokens for e in steps if e.type == "decode") == 8 * 32
        peaks[backend] = session.peak().value
    # the shape the gate reports (docs/gpu.md): slab at or below dense, the monolithic ladder above both
    assert peaks["slab"] <= peaks["dense"] < peaks["monolithic"]
    fused = Session.open(str(_path("slab"))).events_of(FusedChange)
    assert fused and all(e.use_fused for e in fused)


def test_gpu_recordings_open_in_the_tui(tmp_path):
    pytest.importorskip("textual")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tui"))
    from tui_screen_text import screen_text

    from app.tui.app import AppOptions, SlabscopeApp

    async def go() -> str:
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=[_path("slab"), _path("dense")],
                                      recordings_dir=GPU_DIR))
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause(0.5)
            app.refresh_views()
            await pilot.pause(0.3)
            return screen_text(app)

    text = asyncio.run(go())
    assert "slab" in text and "dense" in text
