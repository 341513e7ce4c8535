"""Regenerate the sample recordings shipped in assets/recordings/ (used by the TUI's snapshot and replay tests).

Runs a shortened ``churn`` scenario on the embedded SmolLM2 model with the ``slab`` and ``dense`` backends, one
after the other, each in its own worker process recorded by the probes (``RunSpec.record_path``): the files are
exactly what ``slabscope record`` / the TUI's recorder write. Usage:

    .venv/bin/python tests/tui/make_sample_recording.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OVERRIDES = {"n": 8, "concurrency": 4, "prompt_min": 40, "prompt_max": 200, "gen_min": 6, "gen_max": 24}
POOL = {"block_size": 16, "slab_blocks": 4}


def record(backend: str, out_dir: Path) -> Path:
    from app.workloads.spec import RunSpec
    from app.workloads.worker import WorkerHandle

    path = out_dir / f"sample-churn-{backend}.slabrec"
    path.unlink(missing_ok=True)
    spec = RunSpec(scenario="churn", backend=backend, model="smollm2-135m", overrides=dict(OVERRIDES),
                   sample_hz=10.0, snapshot_hz=4.0, record_path=str(path), blas_threads=2, **POOL)
    handle = WorkerHandle(spec).start()
    handle.join(300.0)
    if handle.error:
        raise SystemExit(f"{backend}: {handle.error}")
    return path


def main() -> int:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "recordings"
    out_dir.mkdir(parents=True, exist_ok=True)
    for backend in ("slab", "dense"):
        start = time.monotonic()
        path = record(backend, out_dir)
        print(f"{path} {path.stat().st_size} bytes in {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
