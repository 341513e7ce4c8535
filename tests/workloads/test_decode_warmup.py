"""The GPU decode warm-up (app/workloads/decode_warmup.py): it runs one throwaway decode step at the batch the run
will decode at, leaves the run's bytes unchanged (every decode step's logits byte-identical with and without it),
reports its time in the run's metadata, and does not run on a CPU unless forced (here it is forced: the path is
the GPU's)."""

from __future__ import annotations

import pytest

from probes.events import MetaUpdate

from .helpers import assert_same_logits, burst_toml, run_backend, write_scenario


def _meta(events) -> dict:
    return next(e.meta for e in events if isinstance(e, MetaUpdate))


@pytest.mark.parametrize("backend", ["slab", "dense"])
def test_the_warmup_changes_no_byte_of_the_run_and_is_reported(backend, tiny_llama, tmp_path, monkeypatch):
    import app.workloads.decode_warmup as warmup

    scenario = write_scenario(tmp_path, burst_toml(n=3, concurrency=2, prompt_tokens="[5, 20]", gen_tokens="4"))
    _, cold_events, cold = run_backend(tiny_llama, scenario, backend, block_size=4, slab_blocks=2)
    assert _meta(cold_events)["decode_warmup_s"] is None  # a CPU run does not warm
    batches = []
    warm = warmup.warm_decode_path
    monkeypatch.setattr(warmup, "wants_warmup", lambda device: True)
    monkeypatch.setattr(warmup, "warm_decode_path", lambda model, batch: batches.append(batch) or warm(model, batch))
    _, events, logits = run_backend(tiny_llama, scenario, backend, block_size=4, slab_blocks=2)
    assert batches == [2]  # the first phase's concurrency (3 requests, 2 at a time)
    assert _meta(events)["decode_warmup_s"] > 0
    assert_same_logits(logits, cold, f"{backend} with the decode warm-up vs without")
    monkeypatch.setenv("SLABSCOPE_DECODE_WARMUP", "0")
    _, off_events, _ = run_backend(tiny_llama, scenario, backend, block_size=4, slab_blocks=2)
    assert _meta(off_events)["decode_warmup_s"] is None and batches == [2]


def test_first_decode_batch_is_the_first_request_phase_concurrency_capped_by_its_count():
    from app.workloads.decode_warmup import first_decode_batch
    from app.workloads.scenarios import Phase, Scenario

    def scenario(*phases):
        return Scenario("s", "", {}, {}, tuple(phases))

    assert first_decode_batch(scenario(Phase("idle", "idle", seconds=1), Phase("r", "requests", count=3,
                                                                              concurrency=8))) == 3
    assert first_decode_batch(scenario(Phase("r", "requests", count=16, concurrency=8))) == 8
    assert first_decode_batch(scenario(Phase("idle", "idle", seconds=1))) == 1


def test_the_warmup_leaves_nothing_in_mlx_buffer_cache(tiny_llama):
    import mlx.core as mx

    from app.workloads.decode_warmup import warm_decode_path

    assert warm_decode_path(tiny_llama.model, 4) > 0
    assert mx.get_cache_memory() == 0
