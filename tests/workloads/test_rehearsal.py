"""The load-time rehearsal (app/workloads/rehearsal.py): it runs the first decode batch's shapes through a
throwaway backend of the run's kind, leaves every byte of the run unchanged (each decode step's logits
byte-identical with and without it), reports what it ran in the run's metadata, releases what it held, and does
not run on a CPU unless forced (here it is forced: the path is the GPU's, the arithmetic the CPU's)."""

from __future__ import annotations

import pytest

from probes.events import MetaUpdate

from .helpers import assert_same_logits, burst_toml, run_backend, write_scenario


def _meta(events) -> dict:
    return next(e.meta for e in events if isinstance(e, MetaUpdate))


@pytest.fixture
def forced(monkeypatch):
    """Rehearse on the CPU; collects every report the rehearsal returns."""
    import app.workloads.rehearsal as rehearsal

    reports = []
    real = rehearsal.rehearse
    monkeypatch.setattr(rehearsal, "runs_on_gpu", lambda device: True)
    monkeypatch.setattr(rehearsal, "rehearse", lambda *a, **k: reports.append(real(*a, **k)) or reports[-1])
    return reports


@pytest.mark.numerics
@pytest.mark.parametrize("backend", ["slab", "monolithic", "dense"])
def test_the_rehearsal_changes_no_byte_of_the_run_and_is_reported(backend, tiny_llama, tmp_path, forced,
                                                                  monkeypatch):
    scenario = write_scenario(tmp_path, burst_toml(n=3, concurrency=2, prompt_tokens="[5, 20]", gen_tokens="5"))
    monkeypatch.setenv("SLABSCOPE_REHEARSAL", "0")
    _, cold_events, cold = run_backend(tiny_llama, scenario, backend, block_size=4, slab_blocks=2)
    assert _meta(cold_events)["rehearsal"] is None and not forced
    monkeypatch.delenv("SLABSCOPE_REHEARSAL")
    summary, events, logits = run_backend(tiny_llama, scenario, backend, block_size=4, slab_blocks=2)
    assert_same_logits(logits, cold, f"{backend} with the rehearsal vs without")
    report = _meta(events)["rehearsal"]
    assert report == forced[0].to_dict() and report["seconds"] > 0 and report["peak_active_bytes"] > 0
    assert summary["rehearsal_s"] == round(report["seconds"], 3)  # outside the run's wall time, said so
    # the first phase's concurrency; three decode steps; the first prompt through the model, the other zero-filled
    prompts = [len(r.prompt) - 1 for r in _first_requests(tiny_llama, scenario)]
    assert (report["batches"], report["decode_steps"]) == ([2], 3)
    assert (report["model_prefill_tokens"], report["zero_filled_tokens"]) == (prompts[0], prompts[1])


@pytest.mark.parametrize("backend", ["slab", "dense"])
def test_a_batched_prefill_is_rehearsed_in_its_batches_and_changes_no_byte(backend, tiny_llama, tmp_path, forced,
                                                                          monkeypatch):
    """With prefill batching the model prefills the chunks the first prompt shares with others (the run's [B, L]
    shapes) and zero-fills the chunks it is not in; the run's logits are those of a run without the rehearsal."""
    scenario = write_scenario(tmp_path, burst_toml(n=3, concurrency=3, prompt_tokens="[10, 40]", gen_tokens="4"))
    pool = dict(block_size=4, slab_blocks=2, prefill_chunk=8, prefill_batch_tokens=64)
    monkeypatch.setenv("SLABSCOPE_REHEARSAL", "0")
    _, _, cold = run_backend(tiny_llama, scenario, backend, **pool)
    monkeypatch.delenv("SLABSCOPE_REHEARSAL")
    _, events, logits = run_backend(tiny_llama, scenario, backend, **pool)
    assert_same_logits(logits, cold, f"{backend} with the rehearsal of a batched prefill vs without")
    report = _meta(events)["rehearsal"]
    prompts = [len(r.prompt) - 1 for r in _first_requests(tiny_llama, scenario)]
    assert report["model_prefill_tokens"] + report["zero_filled_tokens"] == sum(prompts)
    assert report["model_prefill_tokens"] > prompts[0]  # the first prompt's chunks went with the others'


def _batches(loaded, scenario_path, overrides=None):
    from app.workloads.rehearsal import rehearsal_batches
    from app.workloads.scenarios import load_scenario

    return rehearsal_batches(load_scenario(scenario_path, overrides or {}), loaded, seed=0)


def _first_requests(loaded, scenario_path):
    return _batches(loaded, scenario_path)[0]


def test_the_rehearsed_requests_have_the_runs_first_prompts_without_follow_ups(tiny_llama, tmp_path):
    from app.workloads.prompts import make_source, phase_requests
    from app.workloads.scenarios import load_scenario

    path = write_scenario(tmp_path, burst_toml(n=5, concurrency=3, prompt_tokens="[5, 60]", gen_tokens="[2, 9]"))
    scenario = load_scenario(path, {})
    run_first = phase_requests(scenario.phases[0], make_source(tiny_llama, 0), first_id=0)[:3]
    rehearsed = _first_requests(tiny_llama, path)
    assert [(r.prompt, r.max_new_tokens) for r in rehearsed] == [(r.prompt, r.max_new_tokens) for r in run_first]
    assert all(r.on_finish is None and not r.keep_kv and r.kv_key is None for r in rehearsed)


def test_the_rehearsal_releases_its_pool_and_leaves_nothing_in_mlx_cache(tiny_llama, tmp_path):
    import mlx.core as mx

    from app.workloads.engine import Engine
    from app.workloads.rehearsal import clear_after_rehearsal, rehearse
    from app.workloads.scenarios import load_scenario
    from app.workloads.scheduler import Scheduler
    from app.workloads.session import make_backend
    from app.workloads.spec import RunSpec, resolved_pool_params

    path = write_scenario(tmp_path, burst_toml(n=3, concurrency=3, prompt_tokens="[9, 30]", gen_tokens="6"))
    scenario = load_scenario(path, {})
    spec = RunSpec(scenario=path, backend="slab", model=tiny_llama.name, block_size=4, slab_blocks=2)
    params = resolved_pool_params(spec, scenario.pool)
    backend = make_backend(spec, tiny_llama, params)
    scheduler = Scheduler(prefill_chunk=params["prefill_chunk"], admit_fn=backend.admit, release_fn=backend.release)
    engine = Engine(tiny_llama.model, backend, scheduler)
    report = rehearse(engine, _batches(tiny_llama, path), kv_heads=tiny_llama.n_kv_heads,
                      head_dim=tiny_llama.head_dim, dtype=tiny_llama.dtype)
    assert report.decode_steps == 3 and report.batches == (3,)
    assert backend.pool.sequence_ids() == [] and scheduler.running == [] and engine._inflight is None
    backend.pool.check_integrity()
    del engine, scheduler, backend
    clear_after_rehearsal()
    assert mx.get_cache_memory() == 0


def test_a_sampling_run_draws_the_same_random_numbers_with_or_without_the_rehearsal(tiny_llama, tmp_path, forced):
    import mlx.core as mx

    from app.workloads.scenarios import load_scenario
    from app.workloads.session import build_session
    from app.workloads.spec import RunSpec

    path = write_scenario(tmp_path, burst_toml(n=2, concurrency=2, prompt_tokens="[5, 12]", gen_tokens="4"))
    spec = RunSpec(scenario=path, backend="slab", model=tiny_llama.name, block_size=4, slab_blocks=2)
    session = build_session(spec, load_scenario(path, {}), loaded=tiny_llama, temperature=1.0)
    try:
        assert forced and forced[0].decode_steps == 3  # it sampled three steps with the run's sampler
        drawn = mx.random.uniform(shape=(4,))
    finally:
        session.close()
    mx.random.seed(spec.seed)
    assert mx.array_equal(drawn, mx.random.uniform(shape=(4,)))


def test_a_failing_rehearsal_leaves_mlx_lm_attention_as_it_was(tiny_llama, tmp_path, forced, monkeypatch):
    import sys

    import app.workloads.rehearsal as rehearsal
    from app.workloads.scenarios import load_scenario
    from app.workloads.session import build_session
    from app.workloads.spec import RunSpec

    module = sys.modules[type(tiny_llama.model).__module__]
    before = module.scaled_dot_product_attention

    def broken(*args, **kwargs):
        raise RuntimeError("rehearsal broke")

    monkeypatch.setattr(rehearsal, "rehearse", broken)
    path = write_scenario(tmp_path, burst_toml(n=2, concurrency=2, prompt_tokens="[5, 12]", gen_tokens="4"))
    spec = RunSpec(scenario=path, backend="slab", model=tiny_llama.name, block_size=4, slab_blocks=2)
    with pytest.raises(RuntimeError, match="rehearsal broke"):
        build_session(spec, load_scenario(path, {}), loaded=tiny_llama)
    assert module.scaled_dot_product_attention is before


def test_no_request_phase_means_no_rehearsal(tiny_llama):
    from app.workloads.rehearsal import rehearsal_batches
    from app.workloads.scenarios import Phase, Scenario

    idle_only = Scenario("s", "", {}, {}, (Phase("idle", "idle", seconds=1),))
    assert rehearsal_batches(idle_only, tiny_llama, seed=0) == []


def test_the_mlx_defaults_keep_a_users_setting_and_are_reported():
    from app.models.mlx_env import GRAPH_CACHE_ENV, GRAPH_CACHE_SIZE, apply_mlx_defaults, mlx_env_meta

    fresh: dict = {}
    apply_mlx_defaults(fresh)
    assert fresh == {GRAPH_CACHE_ENV: str(GRAPH_CACHE_SIZE)}
    users = {GRAPH_CACHE_ENV: "50"}
    apply_mlx_defaults(users)
    assert users[GRAPH_CACHE_ENV] == "50" and mlx_env_meta(users)[GRAPH_CACHE_ENV] == "50"
    assert mlx_env_meta({})[GRAPH_CACHE_ENV] is None


def test_the_bootstrap_sets_the_graph_cache_before_mlx_and_the_run_reports_it(tiny_llama, tmp_path):
    import os
    import subprocess
    import sys

    code = ("from app.models.blas import enable_openblas; enable_openblas(); import os, sys; "
            "print(os.environ['MLX_CUDA_GRAPH_CACHE_SIZE'], 'mlx.core' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "MLX_CUDA_GRAPH_CACHE_SIZE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.stdout.split() == ["1000", "False"], done.stderr[-1000:]  # set, and mlx not started yet
    scenario = write_scenario(tmp_path, burst_toml(n=2, concurrency=2, prompt_tokens="[5, 9]", gen_tokens="2"))
    _, events, _ = run_backend(tiny_llama, scenario, "slab", block_size=4, slab_blocks=2)
    assert _meta(events)["mlx_env"]["MLX_CUDA_GRAPH_CACHE_SIZE"] == os.environ.get("MLX_CUDA_GRAPH_CACHE_SIZE")


def test_the_rehearsal_measures_its_own_peak_and_keeps_the_process_peak_since_start(tiny_llama, tmp_path):
    import mlx.core as mx

    from app.workloads.engine import Engine
    from app.workloads.rehearsal import rehearse
    from app.workloads.scenarios import load_scenario
    from app.workloads.scheduler import Scheduler
    from app.workloads.session import make_backend
    from app.workloads.spec import RunSpec, resolved_pool_params
    from pool.copy_meter import peak_memory

    # a spike 512 MiB above what this process holds now (other tests' models included), far above what the tiny
    # rehearsal adds to it
    big = mx.zeros((128, 1024, 1024), dtype=mx.float32)
    mx.eval(big)
    spike = mx.get_active_memory()
    del big
    before = peak_memory()
    path = write_scenario(tmp_path, burst_toml(n=2, concurrency=2, prompt_tokens="[9, 20]", gen_tokens="4"))
    spec = RunSpec(scenario=path, backend="slab", model=tiny_llama.name, block_size=4, slab_blocks=2)
    params = resolved_pool_params(spec, load_scenario(path, {}).pool)
    backend = make_backend(spec, tiny_llama, params)
    engine = Engine(tiny_llama.model, backend, Scheduler(prefill_chunk=params["prefill_chunk"],
                                                         admit_fn=backend.admit, release_fn=backend.release))
    report = rehearse(engine, _batches(tiny_llama, path), kv_heads=tiny_llama.n_kv_heads,
                      head_dim=tiny_llama.head_dim, dtype=tiny_llama.dtype)
    assert 0 < report.peak_active_bytes < spike <= before <= peak_memory()


SMALL = {"burst_then_idle": {"burst_prompt": 96, "burst_gen_max": 6, "tail_n": 3},
         "churn": {"n": 5, "prompt_max": 96, "gen_min": 2, "gen_max": 6},
         "ragged_long": {"n": 3, "concurrency": 3, "prompt_min": 32, "prompt_max": 120, "gen_min": 3, "gen_max": 3},
         "distinct_burst": {"n": 3, "prompt_tokens": 200, "gen_tokens": 5},
         "multiturn": {"turns": 2, "user_tokens": 40, "gen_tokens": 5},
         "seqshare": {"prefix_tokens": 128, "n": 3, "gen_tokens": 5},
         "shared_prefix_burst": {"prefix_tokens": 128, "n": 3, "suffix_max": 40, "gen_tokens": 5}}


@pytest.mark.parametrize("backend", ["slab", "monolithic", "dense"])
@pytest.mark.parametrize("scenario", sorted(SMALL))
def test_every_shipped_scenario_with_requests_runs_after_a_rehearsal(scenario, backend, tiny_llama, forced):
    """Each scenario of assets/scenarios that has requests (idle has none: no rehearsal), small, pool integrity
    checked after every step: the rehearsal ran a batch per request phase first and the run then completed."""
    from app.workloads.scenarios import load_scenario

    summary, events, _ = run_backend(tiny_llama, scenario, backend, overrides=SMALL[scenario])
    report = _meta(events)["rehearsal"]
    phases = [p for p in load_scenario(scenario, SMALL[scenario]).phases if p.kind in ("requests", "conversation")]
    assert len(report["batches"]) == len(phases) and report["decode_steps"] >= len(phases)
    assert summary["requests_finished"] > 0 and not summary["cancelled"]


def test_the_shipped_scenarios_are_all_listed_here():
    from pathlib import Path

    shipped = {p.stem for p in (Path(__file__).parents[2] / "assets" / "scenarios").glob("*.toml")}
    assert shipped - {"idle"} == set(SMALL)  # a new scenario gets a small size here and so a rehearsal test


def test_each_request_phase_is_rehearsed_with_the_runs_lengths_in_the_runs_order(tiny_llama):
    """shared_prefix_burst: a one-request prefix phase, then a burst that shares its prefix; the batches are the
    run's first requests of each phase (same prompts, drawn in the same order as WorkloadSession draws them), and
    the burst's batch, rehearsed after the prefix phase on the same throwaway backend, attaches the cached prefix."""
    from app.workloads.prompts import make_source, phase_requests
    from app.workloads.scenarios import load_scenario

    overrides = SMALL["shared_prefix_burst"]
    scenario = load_scenario("shared_prefix_burst", overrides)
    source = make_source(tiny_llama, 0)
    shared = source.tokens(max(p.shared_prefix for p in scenario.phases))
    run_first = [phase_requests(scenario.phases[0], source, first_id=0, shared=shared)[:1],
                 phase_requests(scenario.phases[1], source, first_id=1, shared=shared)[:3]]
    batches = _batches(tiny_llama, "shared_prefix_burst", overrides)
    assert [[r.prompt for r in b] for b in batches] == [[r.prompt for r in b] for b in run_first]


def test_a_later_phase_finds_the_prefix_an_earlier_phase_cached(tiny_llama):
    """A prefix long enough to share (a cached prefix is reused in whole prefill chunks of 512 tokens)."""
    from app.workloads.engine import Engine
    from app.workloads.rehearsal import rehearse
    from app.workloads.scenarios import load_scenario
    from app.workloads.scheduler import Scheduler
    from app.workloads.session import make_backend
    from app.workloads.spec import RunSpec, resolved_pool_params

    overrides = {**SMALL["shared_prefix_burst"], "prefix_tokens": 1024}
    spec = RunSpec(scenario="shared_prefix_burst", backend="slab", model=tiny_llama.name, overrides=overrides)
    params = resolved_pool_params(spec, load_scenario("shared_prefix_burst", overrides).pool)
    backend = make_backend(spec, tiny_llama, params)
    attached = []
    attach = backend.prefix_cache.attach
    backend.prefix_cache.attach = lambda *a, **k: attached.append(attach(*a, **k)) or attached[-1]
    engine = Engine(tiny_llama.model, backend, Scheduler(prefill_chunk=params["prefill_chunk"],
                                                         admit_fn=backend.admit, release_fn=backend.release))
    batches = _batches(tiny_llama, "shared_prefix_burst", overrides)
    report = rehearse(engine, batches, kv_heads=tiny_llama.n_kv_heads, head_dim=tiny_llama.head_dim,
                      dtype=tiny_llama.dtype)
    assert report.batches == (1, 3)
    assert attached[0] == 0 and min(attached[1:]) > 0  # the burst's sequences start from the cached prefix
    assert backend.pool.sequence_ids() == []


def test_each_batch_decodes_alone_the_earlier_batches_released(tiny_llama):
    """burst_then_idle: its burst (4 sequences, still running after three decode steps) is released before the
    tail's batch of 2 is rehearsed, so each decode step holds exactly its own batch."""
    from app.workloads.engine import Engine
    from app.workloads.rehearsal import rehearse
    from app.workloads.scenarios import load_scenario
    from app.workloads.scheduler import Scheduler
    from app.workloads.session import make_backend
    from app.workloads.spec import RunSpec, resolved_pool_params

    overrides = {**SMALL["burst_then_idle"], "burst_gen_min": 9, "burst_gen_max": 12}  # none ends in the rehearsal
    spec = RunSpec(scenario="burst_then_idle", backend="slab", model=tiny_llama.name, overrides=overrides)
    params = resolved_pool_params(spec, load_scenario("burst_then_idle", overrides).pool)
    backend = make_backend(spec, tiny_llama, params)
    engine = Engine(tiny_llama.model, backend, Scheduler(prefill_chunk=params["prefill_chunk"],
                                                         admit_fn=backend.admit, release_fn=backend.release))
    batches = _batches(tiny_llama, "burst_then_idle", overrides)
    sizes = []
    dispatch = engine._dispatch
    engine._dispatch = lambda plan, starts, inputs: sizes.append(len(plan.seqs)) or dispatch(plan, starts, inputs)
    report = rehearse(engine, batches, kv_heads=tiny_llama.n_kv_heads, head_dim=tiny_llama.head_dim,
                      dtype=tiny_llama.dtype)
    assert report.batches == (4, 2) and report.decode_steps == 6
    assert report.model_prefill_tokens == sum(len(b[0].prompt) - 1 for b in batches)  # each batch's first
    burst = sizes.count(4)  # 3 steps, and a pipelined 4th dispatch that the release settles
    assert sizes == [4] * burst + [2] * (len(sizes) - burst), sizes
    assert 3 <= burst <= 4 and 3 <= len(sizes) - burst <= 4


@pytest.mark.parametrize("backend", ["slab", "monolithic"])
def test_the_throwaway_pool_is_freed_before_the_run_starts(backend, tiny_qwen3, forced, monkeypatch):
    """The rehearsal's pool (as large as the run's) must be freed by reference counting when the rehearsal
    returns: not alive when the run's first phase starts, with Python's collector off (it runs at moments no run
    controls). A prefill step and its route referred to each other, and that cycle kept it: on the H200, 11 GiB of
    a 24 GiB footprint."""
    import gc
    import weakref

    import pool.pool as pool_module
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    pools = []
    real_init = pool_module.PagedKVPool.__init__

    def tracking_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        pools.append(weakref.ref(self))

    monkeypatch.setattr(pool_module.PagedKVPool, "__init__", tracking_init)
    alive_at_start = []

    def attach(meta, session):
        alive_at_start.extend(ref() is not None for ref in pools[1:])  # the run's pool is made first

    spec = RunSpec(scenario="churn", backend=backend, model=tiny_qwen3.name, overrides={
        "n": 3, "concurrency": 3, "prompt_min": 40, "prompt_max": 90, "gen_min": 3, "gen_max": 3})
    gc.disable()
    try:
        run_workload(spec, lambda event: None, loaded=tiny_qwen3, attach=attach)
    finally:
        gc.enable()
    assert forced and len(pools) == 2  # the run's pool, then the rehearsal's
    assert alive_at_start == [False], "the rehearsal's pool outlived it"
