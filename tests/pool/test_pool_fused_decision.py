"""Every reason of the fused-decode decision, on CPU, by injecting kernel capabilities and the backend."""

from __future__ import annotations

import pytest

from pool import FusedDecision, KernelCaps, register_kernel, unregister_kernel
from pool.fused_decision import ENV_VAR, REASON_NO_KERNEL, decide, detect_backend
from pool_writes import write_kv

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
    assert pool.fused_decision(dtype="bfloat16", head_dim=128, batch_size=4).reason == \
        "no GPU kernel backend (cpu)"
    monkeypatch.setattr(fused_module, "detect_backend", lambda: "cuda")
    register_kernel(KernelCaps("cuda", frozenset({"bfloat16"}), frozenset({128}), multi_slab=False))
    try:
        assert pool.fused_decision(dtype="bfloat16", head_dim=128, batch_size=4).use_fused
        monkeypatch.setenv(ENV_VAR, "0")
        assert not pool.fused_decision(dtype="bfloat16", head_dim=128, batch_size=4).use_fused
    finally:
        unregister_kernel("cuda")
    counters = pool.counters()  # one decision per step, counted once per layer it applies to
    assert counters.fused_decisions == 2 and counters.gather_decisions == 4
    assert [layer.fused for layer in pool.snapshot().layers] == [FusedDecision(False, f"disabled by {ENV_VAR}=0")] * 2


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
            write_kv(pool, 0, 0, 0, mx.zeros((20, 2, 4)), mx.zeros((20, 2, 4)))
            decision = pool.fused_decision(dtype="float32", head_dim=4, batch_size=1)
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
    write_kv(pool, 0, 0, 0, mx.zeros((20, 2, 4)), mx.zeros((20, 2, 4)))
    try:
        for limit, fused in ((elements - 1, False), (elements, True)):
            register_kernel(KernelCaps("cuda", frozenset({"float32"}), frozenset({4}), multi_slab=True,
                                       max_buffer_elements=limit))
            decision = pool.fused_decision(dtype="float32", head_dim=4, batch_size=1)
            assert decision.use_fused is fused, decision.reason
    finally:
        unregister_kernel("cuda")


def test_one_decision_per_step_serves_every_layer(tiny_pool, monkeypatch):
    """Every layer holds the same slabs (one row space, grown together), so the step's decision runs the rule once
    (the readiness probe is asked once, with the slab count every layer has) and applies to every layer; the
    counters count it once per layer, as when each layer decided alone. Before the first write there is nothing
    to read: no slabs."""
    import mlx.core as mx

    import pool.fused_decision as fused_module

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(fused_module, "detect_backend", lambda: "cuda")
    pool = tiny_pool("slab", num_layers=3)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 20)
    asked = []

    def readiness(num_slabs):
        asked.append(num_slabs)
        return None if num_slabs else "nothing written"

    register_kernel(KernelCaps("cuda", frozenset({"float32"}), frozenset({4}), multi_slab=True))
    try:
        before = pool.fused_decision(dtype="float32", head_dim=4, batch_size=1, readiness=readiness)
        write_kv(pool, 1, 0, 0, mx.zeros((20, 2, 4)), mx.zeros((20, 2, 4)))  # the first write: every layer's slabs
        after = pool.fused_decision(dtype="float32", head_dim=4, batch_size=1, readiness=readiness)
    finally:
        unregister_kernel("cuda")
    assert asked == [0, 3] and not before.use_fused and after.use_fused
    counters = pool.counters()
    assert (counters.fused_decisions, counters.gather_decisions) == (3, 3)
    assert all(layer.fused == after for layer in pool.snapshot().layers)
