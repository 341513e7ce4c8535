"""``run_workload`` closes its session however the run ends (docs/contracts.md): after success, after a failure
in the run or in the caller's hooks, and after a cancel. Closing restores the model's attention function (the paged
SDPA a pool backend installs), which is what a later run in the same process depends on."""

from __future__ import annotations

import threading

import pytest

from .helpers import burst_toml, write_scenario
from pool_writes import write_kv

BURST = burst_toml(n=2, concurrency=2, prompt_tokens="[5, 12]", gen_tokens="3")


@pytest.fixture
def closes(monkeypatch):
    """Every WorkloadSession.close() call, in order (the real close still runs)."""
    from app.workloads.session import WorkloadSession

    calls = []
    real = WorkloadSession.close
    monkeypatch.setattr(WorkloadSession, "close", lambda self: calls.append(self.spec.backend) or real(self))
    return calls


def _sdpa_is_stock(loaded) -> bool:
    import mlx_lm.models.base as base

    module = __import__(type(loaded.model).__module__, fromlist=["x"])
    return module.scaled_dot_product_attention is base.scaled_dot_product_attention


class Boom(Exception):
    pass


def _run(loaded, scenario, backend, **hooks):
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    spec = RunSpec(scenario=scenario, backend=backend, model=loaded.name, block_size=4, slab_blocks=2)
    return run_workload(spec, hooks.pop("emit", lambda event: None), loaded=loaded, **hooks)


def _raise_at_first_step(event):
    from probes.events import Step

    if isinstance(event, Step):
        raise Boom("emit failed")


def _raise(*_):
    raise Boom("hook failed")


@pytest.mark.parametrize("failure", ["emit", "attach", "before_close"])
def test_a_failing_run_still_closes_its_session(failure, tiny_llama, tmp_path, closes):
    scenario = write_scenario(tmp_path, BURST)
    hooks = {"emit": {"emit": _raise_at_first_step}, "attach": {"attach": _raise},
             "before_close": {"before_close": _raise}}[failure]
    with pytest.raises(Boom):
        _run(tiny_llama, scenario, "slab", **hooks)
    assert closes == ["slab"] and _sdpa_is_stock(tiny_llama)


def test_success_and_cancel_close_exactly_once(tiny_llama, tmp_path, closes):
    scenario = write_scenario(tmp_path, BURST)
    assert _run(tiny_llama, scenario, "slab")["cancelled"] is False
    stop = threading.Event()
    stop.set()
    assert _run(tiny_llama, scenario, "monolithic", stop=stop)["cancelled"] is True
    assert closes == ["slab", "monolithic"] and _sdpa_is_stock(tiny_llama)


def test_the_summary_peak_survives_the_copy_meters_resets():
    """Every pool growth resets MLX's peak counter to measure its copies; the footprint summary's "MLX peak" reads
    the corrected peak, so it is never below an active reading taken before the reset."""
    import mlx.core as mx

    from app.workloads.footprint import FootprintTracker
    from pool import PagedKVPool, PoolConfig

    tracker = FootprintTracker()
    big = mx.ones((1024, 1024))
    mx.eval(big)
    tracker.sample()
    del big
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=2, slab_blocks=2))
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 4)
    write_kv(pool, 0, 0, 0, mx.ones((4, 1, 4)), mx.ones((4, 1, 4)))  # a measured growth: MLX's counter is reset
    summary = tracker.summary()
    assert mx.get_peak_memory() < summary["max_active_bytes"] <= summary["mlx_peak_bytes"]
