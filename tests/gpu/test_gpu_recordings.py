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
    # the shape the README's figures report (recorded at 1158daa): slab below both baselines (5,338 MiB against
    # monolithic's 8,826 and dense's 9,890: the baselines' buffer caches hold their prefill transients and, for monolithic, the
    # grow-by-copy ladder)
    assert peaks["slab"] < min(peaks["dense"], peaks["monolithic"])
    assert peaks["slab"] < 0.6 * peaks["dense"]
    fused = Session.open(str(_path("slab"))).events_of(FusedChange)
    assert fused and all(e.use_fused for e in fused)


def test_gpu_recordings_open_in_the_tui(tmp_path):
    pytest.importorskip("textual")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tui"))
    from tui_helpers import settle
    from tui_screen_text import screen_text

    from app.tui.app import AppOptions, SlabscopeApp

    async def go() -> str:
        app = SlabscopeApp(AppOptions(autostart=False, open_paths=[_path("slab"), _path("dense")],
                                      recordings_dir=GPU_DIR))
        async with app.run_test(size=(120, 36)) as pilot:
            await settle(pilot)  # a replay: loaded at mount, nothing else to wait for
            return screen_text(app)

    text = asyncio.run(go())
    assert "slab" in text and "dense" in text


def test_two_h200_nccl_rank_recordings_open_as_one_run_with_the_imbalance_row():
    """The 2-rank NCCL recordings of docs/distributed.md (commit 1158daa): every rank complete, merged into one run
    per backend, and the imbalance the docs report (rank 0 above rank 1 by 1.37x dense, 1.57x slab)."""
    from app.commands.session_files import open_sessions
    from app.commands.compare_ranks import merged

    paths = sorted(str(p) for p in (GPU_DIR / "nccl2").glob("*.slabrec"))
    sessions, error = open_sessions(paths)
    assert len(paths) == 6 and not error and all(s.complete for s in sessions)
    view = merged(sessions)
    assert sorted(run.backend for run in view["runs"]) == ["dense", "slab"]
    assert all(run.world_size == 2 and run.launch_backend == "nccl" for run in view["runs"])
    worst = {row.run: round(row.imbalance, 2) for row in view["imbalance"] if row.phase == "all"}
    assert worst == {"dense": 1.37, "slab": 1.57}
    assert all(row.max_rank == 0 and row.steps_compared == 40 for row in view["imbalance"])
    assert not view["same_outputs"]  # bf16 tensor parallelism: docs/distributed.md says why
