"""``slabscope bench host --emulate-cuda``: the CUDA fused route's host side on the CPU (app/bench/host_emulation.py).
In its own process (it patches the modules it runs with): the slab engine's decode steps must take the fused route
(their graph holds no softmax: the emulated launch returns zeros of its output shapes) while the dense engine's
attend; ``--slab-blocks`` must reach the paged engines' pools."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_emulated_cuda_route_replaces_the_slab_engines_attention():
    args = [sys.executable, "-m", "app", "bench", "host", "--emulate-cuda", "--slab-blocks", "2", "--scenario",
            "distinct_burst",
            "--set", "n=2", "--set", "prompt_tokens=40", "--set", "gen_tokens=4", "--model", "synthetic:tiny-qwen3",
            "--dtype", "float32", "--device", "cpu", "--engines", "slab,dense", "--json"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["config"]["emulate_cuda"] and result["config"]["slab_blocks"] == 2
    engines = result["engines"]
    slab, dense = (engines[name]["decode"]["stats"]["primitives"] for name in ("slab", "dense"))
    assert dense.get("Softmax") and not slab.get("Softmax")
    assert engines["slab"]["decode"]["stats"]["build_ms"]["n"] == 4


def test_slab_blocks_reach_the_paged_engines_pools():
    from app.bench.host_time import EngineSteps, HostConfig
    from app.models import load_model
    from app.workloads.scenarios import load_scenario

    config = HostConfig(overrides={"n": 1, "prompt_tokens": 8, "gen_tokens": 2}, model="synthetic:tiny-qwen3",
                        dtype="float32", device="cpu", engines=("slab",), slab_blocks=3)
    loaded = load_model(config.model, dtype=config.dtype, device=config.device, seed=0)
    runner = EngineSteps("slab", config, loaded, load_scenario(config.scenario, config.overrides))
    try:
        assert runner.session.pool.config.slab_blocks == 3
    finally:
        runner.session.close()
