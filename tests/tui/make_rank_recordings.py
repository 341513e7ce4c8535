"""Regenerate the rank recordings in tests/tui/rank_recordings/ (the Ranks view's snapshot and replay tests).

Runs ``slabscope record --ranks 2`` (mlx.launch, ring backend, this CPU) on a shortened ``churn`` scenario on the
synthetic tiny llama with the ``slab`` and ``dense`` backends: four files, ``churn-<backend>-rank<k>.slabrec``,
exactly what a distributed record writes (about 50 KB together). Usage:

    .venv/bin/python tests/tui/make_rank_recordings.py [OUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SMALL = ["--set", "n=4", "--set", "prompt_max=128", "--set", "gen_max=16", "--set", "concurrency=3"]


def main() -> int:
    from app.cli import main as cli_main

    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "tui" / "rank_recordings"
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.slabrec"):
        old.unlink()
    code = cli_main(["record", "--ranks", "2", "--scenario", "churn", "--backends", "slab,dense", "--model",
                     "synthetic:tiny-llama", "--block-size", "8", "--slab-blocks", "4", *SMALL, "--out", str(out_dir)])
    for path in sorted(out_dir.glob("*.slabrec")):
        print(f"{path} {path.stat().st_size} bytes")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
