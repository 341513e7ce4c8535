"""Rank recordings for the TUI's distributed-run tests: the committed files of a real 2-rank CPU run
(``rank_recordings/``, made by ``make_rank_recordings.py``) and synthetic runs written through the real recorder
whose ranks started far apart, so that aligning them on rank 0's clock is visible.

``write_rank_run(directory, shift=0.5)`` writes ``x-<backend>-rank<k>.slabrec``: rank k's stream is the fixture
stream of ``tui_fixtures.event_stream`` (pool snapshots every 0.5 s, each kept whole, ops, phases) started
``k * shift`` seconds after rank 0's, on the same clock (offset 0), with rank k's footprint ``k * 4 MB`` above rank
0's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
from tui_fixtures import event_stream
from tui_paths import HERE

from probes.events import Done, MetaUpdate, Sample, SnapshotTaken
from probes.recording import SessionRecorder

RANK_DIR = HERE / "rank_recordings"
RANK_FILES = sorted(RANK_DIR.glob("*.slabrec"))


def copy_rank_dir(tmp_path: Path, names: list[str] | None = None) -> Path:
    """A copy of the committed rank recordings (or the named ones) in ``tmp_path/ranks``."""
    out = tmp_path / "ranks"
    out.mkdir()
    for src in RANK_FILES:
        if names is None or src.name in names:
            shutil.copyfile(src, out / src.name)
    return out


def rank_meta(rank: int, world: int, run_id: str, backend: str, offset: float = 0.0) -> dict:
    return {"run_id": run_id, "rank": rank, "world_size": world, "launch_backend": "ring", "host": "fixture-host",
            "pid": 4_000_000 + rank, "device_memory": {"bytes": 24 * 2**30, "source": "fixture"},
            "shard": {"layers": [0, 3], "kv_heads": [rank, rank + 1], "n_kv_heads_total": world,
                      "kv_bytes_per_token": 512},
            "clock": {"offset_s": offset if rank else 0.0, "bound_s": 1e-4}}


def write_rank(path: Path, backend: str, rank: int, world: int = 2, run_id: str = "run-x", shift: float = 0.5,
               close: bool = True, offset: float = 0.0) -> Path:
    """One rank's recording (see the module docstring); ``close=False`` leaves it without an END record; rank k > 0
    records a start clock offset of ``offset`` s to rank 0's clock."""
    t0 = 1000.0 + rank * shift
    events = event_stream(backend, t0=t0)
    meta = dict(events[0].meta, distributed=rank_meta(rank, world, f"{run_id}-{backend}", backend, offset))
    rec = SessionRecorder(path, meta, t0)
    body = []
    for event in events[1:]:
        if isinstance(event, Sample):
            event = msgspec.structs.replace(event, footprint=event.footprint + rank * 4_000_000)
        elif isinstance(event, SnapshotTaken):  # the stand-in pool has no bookkeeping state: keep every one whole
            event = msgspec.structs.replace(event, keyframe=True)
        if not isinstance(event, (MetaUpdate, Done)):
            body.append(event)
    rec.write(body)
    done = events[-1]
    if close:
        rec.close(done.summary, t=done.t)
    else:
        rec.abandon()
    return path


def write_rank_run(directory: Path, shift: float = 0.5, backends=("slab", "dense"), world: int = 2,
                   offset: float = 0.0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for backend in backends:
        for rank in range(world):
            write_rank(directory / f"x-{backend}-rank{rank}.slabrec", backend, rank, world, shift=shift,
                       offset=offset)
    return directory
