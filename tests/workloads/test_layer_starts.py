"""Layer starts (app/workloads/layer_starts.py): every backend sends each layer's K/V of a prefill chunk to the
device as the model builds it, once per layer and chunk, never a decode step's; with them off nothing is started per
layer, and no logit changes either way."""

from __future__ import annotations

import pytest

from .helpers import assert_same_logits, burst_toml, run_backend, write_scenario

BURST = burst_toml(n=3, concurrency=3, prompt_tokens="[40, 70]", gen_tokens="[3, 5]")
POOL = dict(block_size=4, slab_blocks=2, prefill_chunk=16, prefix_cache=False)


class _Spied:
    """mlx.core with the functions named in ``overrides`` replaced."""

    def __init__(self, mx, **overrides):
        self._mx = mx
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(self._mx, name)


def test_the_starts_are_on_unless_the_environment_says_0():
    from app.workloads.layer_starts import ENV_VAR, layer_starts_on

    assert layer_starts_on({}) and layer_starts_on({ENV_VAR: "1"}) and layer_starts_on({ENV_VAR: "yes"})
    assert not layer_starts_on({ENV_VAR: "0"}) and not layer_starts_on({ENV_VAR: " 0 "})


@pytest.mark.numerics
@pytest.mark.parametrize("backend", ["slab", "monolithic", "dense"])
def test_each_prefill_layer_starts_once_as_built_and_no_logit_changes(tiny_llama, tmp_path, backend, monkeypatch):
    """Starts counted where they are sent (the module's ``mx.async_eval``): layers x prefill chunks of more than one
    token (a chunk of one is a decode-sized graph) with them on, each the layer's visible K/V ([B, H, T, D], T > 1);
    none with ``SLABSCOPE_PREFILL_LAYER_STARTS=0``; the two runs' logits byte-identical."""
    from app.workloads import layer_starts

    real = layer_starts.mx.async_eval
    started = []

    def spy(*arrays):
        started.append([tuple(a.shape) for a in arrays])
        return real(*arrays)

    monkeypatch.setattr(layer_starts, "mx", _Spied(layer_starts.mx, async_eval=spy))
    gates, made = [], []  # each gate's chunk in flight; the gates themselves
    real_gate, real_start = layer_starts.LayerGate.__init__, layer_starts.LayerGate.start

    def gate_init(gate, bound, held_bytes, in_flight=None):
        gates.append(in_flight)
        made.append(gate)
        real_gate(gate, bound, held_bytes, in_flight)

    def gate_start(gate, keys, values):
        real_start(gate, keys, values)
        gate.waits += 1  # whatever the timing made it, the run's count must be the gates' sum

    monkeypatch.setattr(layer_starts.LayerGate, "__init__", gate_init)
    monkeypatch.setattr(layer_starts.LayerGate, "start", gate_start)
    scenario = write_scenario(tmp_path, BURST)
    pool = dict(POOL if backend != "dense" else {"prefill_chunk": 16}, prefill_batch_tokens=0)
    summary, events, logits = run_backend(tiny_llama, scenario, backend, **pool)
    chunk_tokens = [e.num_tokens for e in events if type(e).__name__ == "Step" and e.type == "prefill"]
    assert len(chunk_tokens) == sum(p["prefill_steps"] for p in summary["phases"].values())
    started_chunks = [n for n in chunk_tokens if n > 1]  # one sequence a step on a CPU: a chunk's tokens
    layers = len(tiny_llama.model.layers)
    assert len(started_chunks) >= 6 and len(started) == layers * len(started_chunks)
    # one gate a chunk (the bound is on by default); a chunk following one still in flight waits on it first
    assert len(gates) == len(chunk_tokens) and any(g is not None for g in gates)
    waits = summary["prefill_inflight"]["layer_start_waits"]
    assert waits == sum(gate.waits for gate in made) >= len(started)  # the run's summary counts the gates' waits
    for shapes in started:  # the layer's K and V, then the gate's marker
        assert shapes[0] == shapes[1] and len(shapes[0]) == 4 and shapes[0][2] > 1 and shapes[2:] == [(1, 1, 1, 1)]

    monkeypatch.setenv(layer_starts.ENV_VAR, "0")
    count = len(started)
    _, _, off_logits = run_backend(tiny_llama, scenario, backend, **pool)
    assert len(started) == count, "a layer started with the starts off"
    assert_same_logits(logits, off_logits, f"{backend}: layer starts on vs off")


class _Bound:
    """An in-flight bound whose limit is the next of ``limits`` at each start; records each encoding's held bytes and
    kind."""

    def __init__(self, limits: list[int]):
        self._limits, self.encodings = iter(limits), []

    def limit(self, held_bytes: int) -> int:
        return next(self._limits)

    def encoding(self, held_bytes: int, *, chunk: bool = True):
        from contextlib import nullcontext

        self.encodings.append((held_bytes, chunk))
        return nullcontext()


def test_the_gate_waits_for_the_oldest_started_layer_while_over_the_limit(monkeypatch):
    """Before a start, while active memory is above the limit, the gate waits for what is in flight oldest first
    (the previous chunk, then the chunk's earlier layers) and stops once under it; under the limit it never waits.
    Each start is encoded as a layer start (not a chunk) with the held bytes of that moment, and sends the layer's
    K, V and a marker computed from both."""
    import mlx.core as mx

    from app.workloads import layer_starts

    waited, sent = [], []
    real_eval, real_async = mx.eval, mx.async_eval
    active = [5]  # MiB the fake allocator reports: each wait frees one

    def get_active_memory():
        return active[0]

    def evaluate(*arrays):
        waited.append(arrays[0])
        active[0] -= 1
        return real_eval(*arrays)

    def send(*arrays):
        sent.append(arrays)
        return real_async(*arrays)

    monkeypatch.setattr(layer_starts, "mx", _Spied(mx, get_active_memory=get_active_memory, eval=evaluate,
                                                   async_eval=send))
    bound = _Bound(limits=[10, 10, 10, 3])  # the fourth start finds 5 > 3: waits twice (5 -> 4 -> 3)
    held = iter(range(100, 104))
    previous_chunk = mx.ones((2, 3)) * 2
    gate = layer_starts.LayerGate(bound, lambda: next(held), previous_chunk)
    layers = [(mx.full((1, 2, 5, 4), float(i)), mx.full((1, 2, 5, 4), float(10 * i))) for i in range(1, 5)]
    with layer_starts.starting_under(gate):
        for keys, values in layers:
            layer_starts.start_layer(keys, values)
    assert bound.encodings == [(100, False), (101, False), (102, False), (103, False)]
    assert [(id(s[0]), id(s[1])) for s in sent] == [(id(k), id(v)) for k, v in layers]
    assert all(s[2].shape == (1, 1, 1, 1) for s in sent)
    assert [s[2].item() for s in sent] == [11.0, 22.0, 33.0, 44.0]  # K[0,0,0,0] + V[0,0,0,0]: after both
    assert gate.waits == 2 and [id(a) for a in waited] == [id(previous_chunk), id(sent[0][2])]
    assert layer_starts._gate is None  # the engine's gate is set only while it builds a chunk
