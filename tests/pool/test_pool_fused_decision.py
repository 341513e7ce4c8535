"""Every reason of the fused-decode decision, on CPU, by injecting kernel capabilities and the backend."""

from __future__ import annotations

import pytest

from pool import FusedDecision, KernelCaps, register_kernel, unregister_kernel
from pool.fused_decision import ENV_VAR, REASON_NO_KERNEL, decide, detect_backend

CAPS = KernelCaps(backend="cuda", dtypes=frozenset({"bfloat16", "float16"}), head_dims=frozenset({64, 128}),
                  multi_slab=False, min_batch=2, max_batch=64, min_context=1024)


def ask(**overrides):
    args = dict(num_slabs=1, dtype="bfloat16", head_dim=128, batch_size=8, context_len=4096, backend="cuda",
                caps=CAPS, environ={})
    args.update(overrides)
    return decide(**args)


@pytest.mark.parametrize("overrides, fused, reason", [
    ({}, True, "fused cuda kernel (1 slab)"),
    ({"environ": {ENV_VAR: "0"}}, False, f"disabled by {ENV_VAR}=0"),
    ({"environ": {ENV_VAR: "1"}}, True, "fused cuda kernel"),
    ({"backend": "cpu"}, False, "no GPU kernel backend (cpu)"),
    ({"dtype": "float32"}, False, "dtype float32 unsupported by the cuda kernel (bfloat16, float16)"),
    ({"head_dim": 96}, False, "head_dim 96 unsupported by the cuda kernel (64, 128)"),
    ({"batch_size": 1}, False, "batch 1 below measured break-even 2"),
    ({"batch_size": 65}, False, "batch 65 above the kernel's maximum 64"),
    ({"num_slabs": 3}, False, "layer has 3 slabs; the cuda kernel reads one pool buffer"),
    ({"num_slabs": 3, "caps": CAPS.__class__(**{**CAPS.__dict__, "multi_slab": True})}, True, "3 slabs"),
    ({"context_len": 512}, False, "context 512 below measured break-even 1024"),
])
def test_decision_reasons(overrides, fused, reason):
    decision = ask(**overrides)
    assert decision.use_fused is fused and reason in decision.reason


def test_no_registered_kernel_means_gather():
    unregister_kernel("metal")
    decision = decide(num_slabs=1, dtype="bfloat16", head_dim=128, batch_size=8, backend="metal", environ={})
    assert decision.reason == REASON_NO_KERNEL and not decision.use_fused


def test_pool_counts_outcomes_and_uses_registry(tiny_pool, monkeypatch):
    import pool.fused_decision as fused_module

    pool = tiny_pool("slab", num_layers=2)
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert detect_backend() == "cpu"
    assert pool.fused_decision(0, dtype="bfloat16", head_dim=128, batch_size=4).reason == \
        "no GPU kernel backend (cpu)"
    monkeypatch.setattr(fused_module, "detect_backend", lambda: "cuda")
    register_kernel(KernelCaps("cuda", frozenset({"bfloat16"}), frozenset({128}), multi_slab=False))
    try:
        assert pool.fused_decision(1, dtype="bfloat16", head_dim=128, batch_size=4).use_fused
        monkeypatch.setenv(ENV_VAR, "0")
        assert not pool.fused_decision(1, dtype="bfloat16", head_dim=128, batch_size=4).use_fused
    finally:
        unregister_kernel("cuda")
    counters = pool.counters()
    assert counters.fused_decisions == 1 and counters.gather_decisions == 2
    layers = pool.snapshot().layers
    assert layers[1].fused == FusedDecision(False, f"disabled by {ENV_VAR}=0")
    assert layers[0].fused.reason == "no GPU kernel backend (cpu)"


def test_monolithic_layer_is_one_buffer_for_the_multi_slab_rule(tiny_pool, monkeypatch):
    import mlx.core as mx

    import pool.fused_decision as fused_module

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(fused_module, "detect_backend", lambda: "metal")
    register_kernel(KernelCaps("metal", frozenset({"float32"}), frozenset({4}), multi_slab=False))
    try:
        for design, fused in (("slab", False), ("monolithic", True)):
            pool = tiny_pool(design, num_layers=1)  # 8-token slabs; 20 tokens -> 3 slabs or one 32-row tensor
            pool.add_sequence(0)
            pool.prepare_write(0, 0, 20)
            pool.write(0, 0, 0, mx.zeros((20, 2, 4)), mx.zeros((20, 2, 4)))
            decision = pool.fused_decision(0, dtype="float32", head_dim=4, batch_size=1)
            assert decision.use_fused is fused, decision.reason
    finally:
        unregister_kernel("metal")


# ---- rule 6: a K/V tensor past the kernel's 32-bit index range (emulated sizes: nothing that large is allocated) --
def test_tensor_past_32_bit_index_range_declines_at_the_boundary():
    """Literal element counts (2^32 - 1 runs, 2^32 declines), not relative to INDEX_LIMIT: a limit moved to 2^31
    must fail here."""
    assert ask(buffer_elements=2**32 - 1).use_fused
    assert ask(buffer_elements=2**31).use_fused  # past a signed 32-bit index: the kernel's index is unsigned
    decision = ask(buffer_elements=2**32)
    assert not decision.use_fused
    assert "exceeds the cuda kernel's index range" in decision.reason and "4,294,967,296 elements" in decision.reason
    assert ask(buffer_elements=None).use_fused  # unknown size (no storage yet): not checked


def test_index_range_rule_comes_before_the_soft_thresholds():
    """A hard limit: the reason is the index range even where a threshold would also send the layer to gather."""
    assert "index range" in ask(buffer_elements=2**32, context_len=1, num_slabs=3).reason
    assert "index range" in ask(buffer_elements=2**32, readiness=lambda n: "kernel compiling").reason


@pytest.mark.parametrize("design", ["slab", "monolithic"])
def test_pool_asks_with_its_largest_tensor(tiny_pool, monkeypatch, design):
    """The pool passes its largest tensor's element count: a kernel whose limit is one element below it declines,
    one whose limit equals it runs (a slab of 2 rows x 4 tokens x 2 heads x 4 = 64 elements; monolithic: the
    whole 32-row tensor = 1024)."""
    import mlx.core as mx

    import pool.fused_decision as fused_module

    elements = 64 if design == "slab" else 32 * 4 * 2 * 4
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(fused_module, "detect_backend", lambda: "cuda")
    pool = tiny_pool(design, num_layers=1)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 20)
    pool.write(0, 0, 0, mx.zeros((20, 2, 4)), mx.zeros((20, 2, 4)))
    try:
        for limit, fused in ((elements - 1, False), (elements, True)):
            register_kernel(KernelCaps("cuda", frozenset({"float32"}), frozenset({4}), multi_slab=True,
                                       max_buffer_elements=limit))
            decision = pool.fused_decision(0, dtype="float32", head_dim=4, batch_size=1)
            assert decision.use_fused is fused, decision.reason
    finally:
        unregister_kernel("cuda")


def test_pool_decides_every_layer_once_per_distinct_slab_geometry(tiny_pool, monkeypatch):
    """``fused_decisions`` answers each layer as ``fused_decision`` would and counts each layer, but runs the rule
    once per distinct (slab count, largest tensor): the readiness probe is asked once for the two written layers
    (3 slabs each) and once for the unwritten one (none), not once per layer."""
    import mlx.core as mx

    import pool.fused_decision as fused_module

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(fused_module, "detect_backend", lambda: "cuda")
    pool = tiny_pool("slab", num_layers=3)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 20)
    for layer in (0, 1):
        pool.write(layer, 0, 0, mx.zeros((20, 2, 4)), mx.zeros((20, 2, 4)))
    asked = []

    def readiness(num_slabs):
        asked.append(num_slabs)
        return None if num_slabs else "nothing written"

    register_kernel(KernelCaps("cuda", frozenset({"float32"}), frozenset({4}), multi_slab=True))
    try:
        decisions = pool.fused_decisions(dtype="float32", head_dim=4, batch_size=1, readiness=readiness)
        assert sorted(asked) == [0, 3]
        singles = [pool.fused_decision(layer, dtype="float32", head_dim=4, batch_size=1, readiness=readiness)
                   for layer in range(3)]
    finally:
        unregister_kernel("cuda")
    assert decisions == singles and [d.use_fused for d in decisions] == [True, True, False]
    counters = pool.counters()
    assert (counters.fused_decisions, counters.gather_decisions) == (4, 2)
    assert [layer.fused for layer in pool.snapshot().layers] == decisions
