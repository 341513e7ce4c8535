"""Scenario files: every bundled one loads and runs (shrunk) on a tiny model; bad input is rejected clearly."""

import subprocess
import sys

import pytest

from app.workloads.scenarios import DEFAULT_SCENARIO, ScenarioError, list_scenarios, load_scenario, parse_overrides
from probes.events import PhaseEdge

from .helpers import run_backend

EXPECTED = {"idle", "distinct_burst", "shared_prefix_burst", "seqshare", "multiturn", "churn", "burst_then_idle", "ragged_long"}

# per scenario: overrides that keep it to a fraction of a second on a tiny model
SHRINK = {
    "idle": {"seconds": 0.1},
    "distinct_burst": {"n": 3, "prompt_tokens": 96, "gen_tokens": 4},
    "shared_prefix_burst": {"prefix_tokens": 96, "n": 3, "suffix_min": 8, "suffix_max": 20, "gen_tokens": 3},
    "seqshare": {"prefix_tokens": 96, "n": 3, "suffix_tokens": 10, "gen_tokens": 3},
    "multiturn": {"turns": 3, "user_tokens": 20, "gen_tokens": 6},
    "churn": {"n": 6, "prompt_max": 80, "gen_max": 10},
    "ragged_long": {"n": 4, "concurrency": 4, "prompt_min": 16, "prompt_max": 90, "gen_min": 4, "gen_max": 4},
    "burst_then_idle": {"burst_n": 3, "burst_prompt": 64, "burst_gen_max": 12, "tail_n": 6, "tail_prompt_max": 24,
                        "tail_gen_max": 6},
}


def test_bundled_scenarios_are_listed_with_descriptions():
    listed = dict(list_scenarios())
    assert set(listed) == EXPECTED and all(listed.values())
    assert DEFAULT_SCENARIO in listed


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_scenario_runs_on_slab_and_dense(name, tiny_llama):
    for backend in ("slab", "dense"):
        summary, events, _ = run_backend(tiny_llama, name, backend, overrides=SHRINK[name], block_size=8,
                                         prefill_chunk=32)
        phases = [(e.name, e.edge) for e in events if isinstance(e, PhaseEdge)]
        scenario = load_scenario(name, SHRINK[name])
        assert phases == [(p.name, edge) for p in scenario.phases for edge in ("start", "end")]
        assert summary["requests_finished"] == scenario.num_requests
        if name == "shared_prefix_burst" and backend == "slab":
            assert summary["prefix_cache"]["hits"] == 3 and summary["prefix_cache"]["cached_tokens"] == 3 * 96
        if name == "multiturn":
            # turns 2 and 3 resume from the kept conversation; on the pool the first write into its shared partial
            # block copies it
            assert summary["conversations"]["resumed_turns"] == 2
            if backend == "slab":
                assert summary["pool"]["counters"]["cow_copies"] > 0


def test_overrides_apply_and_are_checked():
    s = load_scenario("churn", parse_overrides(["n=3", "concurrency=2"]))
    assert s.params["n"] == 3 and s.phases[0].count == 3 and s.phases[0].concurrency == 2
    with pytest.raises(ScenarioError, match="no parameter 'bogus'"):
        load_scenario("churn", {"bogus": 1})
    with pytest.raises(ScenarioError, match="count must be >= 1, got 0"):
        load_scenario("churn", {"n": 0})
    with pytest.raises(ScenarioError, match=r"prompt_tokens \[min, max\] has min > max"):
        load_scenario("churn", {"prompt_min": 900})  # min > max
    with pytest.raises(ScenarioError, match="key=value"):
        parse_overrides(["n"])


def test_unknown_scenario_names_the_known_ones():
    with pytest.raises(ScenarioError, match="unknown scenario 'nope'.*churn"):
        load_scenario("nope")
    with pytest.raises(ScenarioError, match="unknown scenario"):
        load_scenario("../churn")


def test_scenario_loading_and_the_run_parser_import_no_mlx():
    code = ("import sys, argparse, app.workloads, app.commands.run, app.commands.generate\n"
            "p = argparse.ArgumentParser(); sub = p.add_subparsers()\n"
            "app.commands.run.add_parser(sub); app.commands.generate.add_parser(sub)\n"
            "app.workloads.load_scenario('churn'); sys.exit('mlx' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_session_refuses_sequences_longer_than_the_models_positions(tiny_llama):
    """Checked again against the loaded model (a RunSpec built without the CLI): nothing runs."""
    from app.workloads.limits import WorkloadLimitError

    with pytest.raises(WorkloadLimitError, match="up to 5,032 tokens .* exceed synthetic:tiny-llama's 4,096 positions"):
        run_backend(tiny_llama, "distinct_burst", "slab", overrides={"n": 1, "prompt_tokens": 5000})


def test_the_session_refuses_a_slab_the_device_cannot_hold(tiny_llama):
    from pool.errors import SizeLimitError

    with pytest.raises(SizeLimitError, match="the pool's first slab"):
        run_backend(tiny_llama, "distinct_burst", "slab", overrides={"n": 1}, slab_blocks=10**9)
