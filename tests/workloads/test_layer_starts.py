"""Layer starts (app/workloads/layer_starts.py): every backend sends each layer's K/V of a prefill chunk to the
device as the model builds it, once per layer and chunk, never a decode step's; with them off nothing is started per
layer, and no logit changes either way."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from .helpers import assert_same_logits, burst_toml, run_backend, write_scenario

BURST = burst_toml(n=3, concurrency=3, prompt_tokens="[40, 70]", gen_tokens="[3, 5]")
POOL = dict(block_size=4, slab_blocks=2, prefill_chunk=16, prefix_cache=False)


def test_the_starts_are_on_unless_the_environment_says_0():
    from app.workloads.layer_starts import ENV_VAR, layer_starts_on

    assert layer_starts_on({}) and layer_starts_on({ENV_VAR: "1"}) and layer_starts_on({ENV_VAR: "yes"})
    assert not layer_starts_on({ENV_VAR: "0"}) and not layer_starts_on({ENV_VAR: " 0 "})


@pytest.mark.numerics
@pytest.mark.parametrize("backend", ["slab", "monolithic", "dense"])
def test_each_prefill_layer_starts_once_as_built_and_no_logit_changes(tiny_llama, tmp_path, backend, monkeypatch):
    """Starts counted where they are sent (the module's ``mx.async_eval``): layers x prefill chunks of more than one
    token (a chunk of one is a decode-sized graph) with them on, each
    the layer's visible K/V ([B, H, T, D], T > 1); none with ``SLABSCOPE_PREFILL_LAYER_STARTS=0``; the two runs'
    logits byte-identical."""
    from app.workloads import layer_starts

    real = layer_starts.mx.async_eval
    started = []

    def spy(*arrays):
        started.append([tuple(a.shape) for a in arrays])
        return real(*arrays)

    monkeypatch.setattr(layer_starts, "mx", SimpleNamespace(async_eval=spy))
    scenario = write_scenario(tmp_path, BURST)
    pool = dict(POOL if backend != "dense" else {"prefill_chunk": 16}, prefill_batch_tokens=0)
    summary, events, logits = run_backend(tiny_llama, scenario, backend, **pool)
    chunk_tokens = [e.num_tokens for e in events if type(e).__name__ == "Step" and e.type == "prefill"]
    assert len(chunk_tokens) == sum(p["prefill_steps"] for p in summary["phases"].values())
    started_chunks = [n for n in chunk_tokens if n > 1]  # one sequence a step on a CPU: a chunk's tokens
    layers = len(tiny_llama.model.layers)
    assert len(started_chunks) >= 6 and len(started) == layers * len(started_chunks)
    for shapes in started:
        assert len(shapes) == 2 and shapes[0] == shapes[1] and len(shapes[0]) == 4 and shapes[0][2] > 1

    monkeypatch.setenv(layer_starts.ENV_VAR, "0")
    count = len(started)
    _, _, off_logits = run_backend(tiny_llama, scenario, backend, **pool)
    assert len(started) == count, "a layer started with the starts off"
    assert_same_logits(logits, off_logits, f"{backend}: layer starts on vs off")
