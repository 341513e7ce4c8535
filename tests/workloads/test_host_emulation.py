"""``python -m app.bench.host_emulation``: ``bench host`` with the CUDA fused route's host side on the CPU. In its own
process (it patches the modules it runs with): the slab engine's decode steps must take the fused route (their
graph holds no softmax: the emulated launch returns zeros of its output shapes) while the dense engine's attend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_emulated_cuda_route_replaces_the_slab_engines_attention():
    args = [sys.executable, "-m", "app.bench.host_emulation", "--slab-blocks", "2", "--scenario", "distinct_burst",
            "--set", "n=2", "--set", "prompt_tokens=40", "--set", "gen_tokens=4", "--model", "synthetic:tiny-qwen3",
            "--dtype", "float32", "--device", "cpu", "--engines", "slab,dense", "--json"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    engines = json.loads(proc.stdout)["engines"]
    slab, dense = (engines[name]["decode"]["stats"]["primitives"] for name in ("slab", "dense"))
    assert dense.get("Softmax") and not slab.get("Softmax")
    assert engines["slab"]["decode"]["stats"]["build_ms"]["n"] == 4
