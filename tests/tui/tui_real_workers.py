"""A worker factory for tests that runs the real workload engine (spawned worker processes, probes, a tiny
synthetic llama with seeded random weights) on a shortened churn scenario: a few seconds per backend."""

from __future__ import annotations

from app.tui import sources

TINY_OVERRIDES = {"n": 24, "concurrency": 4, "prompt_min": 24, "prompt_max": 96, "gen_min": 24, "gen_max": 64}
TINY_MODEL = "synthetic:tiny-llama"


def tiny_factory(name: str, **params):
    """sources.make_worker with the tiny model and scenario sizes (the app passes scenario/model/pool sizes)."""
    params["model"] = TINY_MODEL
    params["block_size"] = params.get("block_size") or 8
    params["slab_blocks"] = params.get("slab_blocks") or 4
    return sources.make_worker(name, overrides=dict(TINY_OVERRIDES), sample_hz=20.0, snapshot_hz=8.0, **params)
