"""Shrink under real workloads: with compaction running at every step boundary, on every shipped scenario, the pool
keeps its integrity after every step and every decode step's logits are equal bytes to the dense baseline's and to
the same run with the policy off (tiny blocks and slabs so blocks really move, shared prefixes and kept
conversations included). Also: the run summary and the ``Shrunk`` events carry what was moved and released."""

from __future__ import annotations

import pytest

from app.workloads.scenarios import list_scenarios
from probes.events import Shrunk

from .helpers import assert_same_logits, run_backend

# CPU-test sizes of each shipped scenario (a scenario not listed runs with its own defaults)
SMALL = {
    "churn": {"n": 6, "prompt_min": 8, "prompt_max": 96, "gen_min": 2, "gen_max": 12},
    "ragged_long": {"n": 4, "concurrency": 4, "prompt_min": 16, "prompt_max": 96, "gen_min": 4, "gen_max": 4},
    "distinct_burst": {"n": 3, "prompt_tokens": 64, "gen_tokens": 6},
    "idle": {"seconds": 0.2},
    "multiturn": {"turns": 3, "user_tokens": 24, "gen_tokens": 6},
    "seqshare": {"prefix_tokens": 64, "n": 3, "suffix_tokens": 8, "gen_tokens": 4},
    "shared_prefix_burst": {"prefix_tokens": 64, "n": 3, "suffix_min": 4, "suffix_max": 16, "gen_tokens": 4},
    "burst_then_idle": {"burst_n": 3, "burst_prompt": 64, "burst_gen_max": 12, "tail_n": 6, "tail_prompt_max": 24,
                        "tail_gen_max": 6},
}
GEOMETRY = {"block_size": 4, "slab_blocks": 2, "prefill_chunk": 16}
COMPACT = {"shrink": "compact", "shrink_budget": 1 << 30}
MOVES = ("churn", "burst_then_idle")  # scenarios whose tests must see blocks move (the others free whole slabs)


@pytest.fixture
def any_fill(monkeypatch):
    """Compaction may move a slab's every block (max_fill 1.0, not the CLI's 0.5): as many moves as possible."""
    from app.workloads.spec import RunSpec
    from pool import ShrinkPolicy

    real = RunSpec.shrink_policy
    monkeypatch.setattr(RunSpec, "shrink_policy", lambda spec: ShrinkPolicy(spec.shrink, real(spec).budget_bytes, 1.0))


@pytest.mark.numerics
@pytest.mark.parametrize("scenario", [name for name, _ in list_scenarios()])
def test_compaction_keeps_integrity_and_byte_identical_outputs(tiny_llama, scenario, any_fill):
    overrides = SMALL.get(scenario, {})
    dense = run_backend(tiny_llama, scenario, "dense", overrides=overrides, **GEOMETRY)
    off = run_backend(tiny_llama, scenario, "slab", overrides=overrides, **GEOMETRY)
    compact = run_backend(tiny_llama, scenario, "slab", overrides=overrides, **GEOMETRY, **COMPACT)
    assert_same_logits(compact[2], dense[2], f"{scenario}: compacting slab vs dense")
    assert_same_logits(compact[2], off[2], f"{scenario}: compacting slab vs policy off")
    summary = compact[0]
    assert summary["outputs"] == dense[0]["outputs"] == off[0]["outputs"]
    shrink = summary["shrink"]
    assert shrink["policy"] == "compact" and shrink["points"] >= summary["steps"]  # every step, and idle ticks
    counters = summary["pool"]["counters"]
    assert (shrink["blocks_moved"], shrink["slabs_released"]) == (counters["blocks_moved"], counters["slab_releases"])
    if summary["decode_tokens"]:  # every scenario with requests frees rows: slabs go back
        stats, kept = summary["pool"]["stats"], off[0]["pool"]["stats"]
        assert counters["slab_releases"] > 0 and off[0]["pool"]["counters"]["slab_releases"] == 0
        assert stats["bytes_reserved"] < kept["bytes_reserved"]
        if not stats["live_blocks"]:  # nothing left (no cached prefix): nothing reserved
            assert stats["bytes_reserved"] == 0
    if scenario in MOVES:
        assert counters["blocks_moved"] > 0
    events = [e for e in compact[1] if isinstance(e, Shrunk)]
    assert sum(e.report.blocks_moved for e in events) == counters["blocks_moved"]
    assert sum(e.report.bytes_moved for e in events) == counters["bytes_moved"] == shrink["bytes_moved"]


@pytest.mark.numerics
def test_compaction_moves_blocks_on_churn_and_keeps_the_monolithic_baseline_identical(tiny_llama):
    """Churn frees rows under running sequences: compaction moves their blocks down (slab), and the monolithic
    design reallocates smaller (allocate-smaller-and-copy, measured) with the same outputs."""
    overrides = dict(SMALL["churn"], n=8)
    dense = run_backend(tiny_llama, "churn", "dense", overrides=overrides, **GEOMETRY)
    for backend in ("slab", "monolithic"):
        summary, _, logits = run_backend(tiny_llama, "churn", backend, overrides=overrides, **GEOMETRY,
                                         **dict(COMPACT, shrink_budget=1 << 30))
        assert_same_logits(logits, dense[2], f"compacting {backend} vs dense")
        counters = summary["pool"]["counters"]
        assert counters["slab_releases"] > 0
        if backend == "slab":
            assert counters["blocks_moved"] > 0 and counters["bytes_moved"] >= counters["bytes_moved_model"] > 0
        else:
            assert counters["bytes_moved"] > 0  # the kept rows, copied into the smaller tensor


def test_a_shrink_points_time_counts_in_its_steps_wall_time(tiny_llama, monkeypatch):
    """The engine's shrink point after each step is work on the serving path: its time is in the step's wall
    time (so decode tok/s pays for it) and in the run's tally."""
    import time

    from app.workloads.backends import PagedBackend

    real = PagedBackend.shrink_point

    def slow(self):
        time.sleep(0.02)
        return real(self)

    monkeypatch.setattr(PagedBackend, "shrink_point", slow)
    summary, events, _ = run_backend(tiny_llama, "churn", "slab", overrides=dict(SMALL["churn"], n=2), **GEOMETRY,
                                     **COMPACT)
    from probes.events import Step

    steps = [e for e in events if isinstance(e, Step)]
    assert steps and all(step.wall_s >= 0.02 for step in steps)
    assert summary["shrink"]["points"] == len(steps) and summary["shrink"]["seconds"] >= 0.02 * len(steps)
    decode = [s for s in steps if s.type == "decode"]
    assert summary["shrink"]["decode_seconds"] >= 0.02 * len(decode)
