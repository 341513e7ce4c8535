"""Fused paged decode in the live path: per-layer decisions at every decode step, their events and counters, the
paged SDPA that routes a fused layer's attention to the kernel, and SLABSCOPE_PAGED_ATTENTION_NATIVE=0.

No GPU here, so the routing runs the product's fused route (``KernelRoute`` -> step plans ->
``pool.kernels.paged_decode.fused_decode``) on a pretend "metal" backend whose kernel is the CPU emulation of the
fused kernel (``pool.kernels.paged_decode_emulated``: the kernel's blocking, online softmax and merge order in
float32, reading K/V from the slab tensors through the block table). The fused run and the gather run are two
different computations of the same attention (online softmax in the log2 domain against MLX's SDPA over a padded
batch), so their logits are compared within ``reorder_tolerance`` (float32) with identical greedy tokens, and
must not be byte-identical (that would mean the fused route never ran its own arithmetic).
"""

import pytest

from probes.events import FusedChange, GatherRuns, Step

from .helpers import assert_close_logits, burst_toml, run_backend, write_scenario

BURST = burst_toml(n=3, concurrency=3, prompt_tokens="[9, 40]", gen_tokens="[4, 9]")
POOL = dict(block_size=4, slab_blocks=2, prefill_chunk=16, prefix_cache=False)


@pytest.fixture
def fake_metal(monkeypatch):
    """The product's fused route on a pretend "metal" backend (MLX's device reported as metal) whose kernel is the
    CPU emulation of the fused kernel. Returns (route, calls): ``route(min_batch=N, plans=True)`` builds a
    ``KernelRoute`` registering the kernel with a break-even batch of N; ``plans=False`` makes the route call the
    kernel without a step plan (each layer plans from its own view). ``calls`` records (layer, seq_ids, backend)."""
    import pool.fused_decision as fd
    import pool.kernels.paged_decode as paged_decode
    from app.workloads.fused_attention import KernelRoute
    from pool.fused_decision import KernelCaps, register_kernel, unregister_kernel
    from pool.kernels.paged_decode_emulated import paged_decode_emulated

    calls = []
    kernels = {"metal": paged_decode_emulated}

    def kernel_for_backend(backend):
        return kernels[backend]

    def run(pool, layer, seq_ids, queries, *, scale, backend, plan=None, meta=None, launches=None):
        calls.append((layer, tuple(seq_ids), backend))
        return paged_decode.fused_decode(pool, layer, seq_ids, queries, scale=scale, backend=backend, plan=plan,
                                         meta=meta, launches=launches)

    def route(min_batch: int = 1, plans: bool = True):
        def register():
            register_kernel(KernelCaps(backend="metal", dtypes=frozenset({"float32"}),
                                       head_dims=frozenset({16, 32}), multi_slab=True, min_batch=min_batch))
            return ["metal"]

        return KernelRoute(run=run, register=register, backend="metal", accepts_plan=plans, accepts_launches=plans)

    monkeypatch.setattr(paged_decode, "kernel_for_backend", kernel_for_backend)
    monkeypatch.setattr(fd, "detect_backend", lambda: "metal")
    monkeypatch.delenv("SLABSCOPE_PAGED_ATTENTION_NATIVE", raising=False)
    yield route, calls
    unregister_kernel("metal")


def _assert_fused_matches_gather(fused_logits, gather_logits, label):
    """Within the float32 reorder tolerance with the same tokens, and not the same bytes: the fused route ran the
    kernel's own arithmetic."""
    import mlx.core as mx

    assert_close_logits(fused_logits, gather_logits, label)
    assert any(not mx.array_equal(f, g) for (_, f), (_, g) in zip(fused_logits, gather_logits)), \
        f"{label}: byte-identical logits: the fused route did not compute its own attention"


def _decode_steps(events):
    return [e for e in events if isinstance(e, Step) and e.type == "decode"]


def test_cpu_decision_is_gather_with_a_reason_asked_per_layer_per_decode_step(tiny_llama, tmp_path):
    summary, events, _ = run_backend(tiny_llama, write_scenario(tmp_path, BURST), "slab", **POOL)
    decode = _decode_steps(events)
    layers = tiny_llama.num_layers
    counters = summary["pool"]["counters"]
    assert counters["gather_decisions"] == len(decode) * layers and counters["fused_decisions"] == 0
    fused = [e for e in events if isinstance(e, FusedChange)]
    # one event per layer: the decision never changes on CPU, so it is not repeated every step
    assert [e.layer for e in fused] == list(range(layers))
    assert all(not e.use_fused and e.reason == "no GPU kernel backend (cpu)" for e in fused)
    gathers = [e for e in events if isinstance(e, GatherRuns)]
    assert len(gathers) == len(decode) and [g.step for g in gathers] == [d.step for d in decode]
    for g, d in zip(gathers, decode):
        assert len(g.seq_ids) == d.batch and g.fused_layers == 0
        assert len(g.runs_layer0) == len(g.runs_max) == len(g.seq_ids)
        assert all(1 <= first <= most for first, most in zip(g.runs_layer0, g.runs_max))
    assert max(max(g.runs_max) for g in gathers) > 1  # 2-block slabs: several runs


@pytest.mark.numerics
@pytest.mark.parametrize("model", ["tiny_llama", "tiny_qwen3"])
@pytest.mark.parametrize("backend", ["slab", "monolithic"])
def test_fused_route_matches_the_gather_run_within_float32_tolerance(model, backend, fake_metal, request, tmp_path,
                                                                      monkeypatch):
    import mlx_lm.models.base as base

    loaded = request.getfixturevalue(model)
    module = __import__(type(loaded.model).__module__, fromlist=["x"])
    make_route, calls = fake_metal
    scenario = write_scenario(tmp_path, BURST)
    fused_sum, fused_ev, fused_logits = run_backend(loaded, scenario, backend, kernel_route=make_route(), **POOL)
    assert module.scaled_dot_product_attention is base.scaled_dot_product_attention  # restored after the run
    monkeypatch.setenv("SLABSCOPE_PAGED_ATTENTION_NATIVE", "0")
    kernel_calls = len(calls)
    gather_sum, gather_ev, gather_logits = run_backend(loaded, scenario, backend, kernel_route=make_route(), **POOL)

    decode, layers = _decode_steps(fused_ev), loaded.num_layers
    assert kernel_calls == len(decode) * layers and len(calls) == kernel_calls  # env=0: the kernel never ran
    assert all(backend_name == "metal" for _, _, backend_name in calls)
    assert fused_sum["pool"]["counters"]["fused_decisions"] == len(decode) * layers
    assert gather_sum["pool"]["counters"]["gather_decisions"] == len(decode) * layers
    assert gather_sum["pool"]["counters"]["fused_decisions"] == 0
    reasons = [e.reason for e in fused_ev if isinstance(e, FusedChange) and e.layer == 0]
    assert all(r.startswith("fused metal kernel (") for r in reasons)
    # one event per layer: the slab pool reserved every admitted request's final length before its first step, so
    # its slab count (named in the reason) never changed during decode; the monolithic pool is one buffer
    assert len(reasons) == 1
    assert {e.reason for e in gather_ev if isinstance(e, FusedChange)} == {
        "disabled by SLABSCOPE_PAGED_ATTENTION_NATIVE=0"}
    assert all(g.fused_layers == layers for g in fused_ev if isinstance(g, GatherRuns))
    _assert_fused_matches_gather(fused_logits, gather_logits, f"{model}/{backend} fused route vs gather")
    runs = lambda evs: [(e.seq_ids, e.runs_layer0, e.runs_max) for e in evs if isinstance(e, GatherRuns)]  # noqa: E731
    assert runs(fused_ev) == runs(gather_ev)  # the runs counted from the tables == what the gathers read


def test_decisions_are_asked_with_the_real_batch_size(tiny_llama, fake_metal, tmp_path):
    """A kernel that breaks even from batch 2: steps decoding 2-3 sequences go fused, steps decoding one sequence
    (the batch drains as requests finish) gather with the batch-size reason. Asking with any other batch size
    (say max(2, B)) shows up here."""
    make_route, calls = fake_metal
    scenario = write_scenario(tmp_path, burst_toml(n=3, concurrency=3, prompt_tokens="[9, 40]", gen_tokens="[2, 12]"))
    summary, events, _ = run_backend(tiny_llama, scenario, "slab", kernel_route=make_route(min_batch=2), **POOL)
    layers = tiny_llama.num_layers
    batch_of = {d.step: d.batch for d in _decode_steps(events)}
    gathers = [e for e in events if isinstance(e, GatherRuns)]
    assert {batch_of[g.step] for g in gathers} >= {1, 2}, "the scenario must decode batches of 1 and of 2+"
    for g in gathers:
        assert g.fused_layers == (layers if batch_of[g.step] >= 2 else 0), g
    reasons = {e.reason for e in events if isinstance(e, FusedChange)}
    assert "batch 1 below measured break-even 2" in reasons
    fused_steps = sum(1 for g in gathers if batch_of[g.step] >= 2)
    assert summary["pool"]["counters"]["fused_decisions"] == fused_steps * layers == len(calls)


def test_a_fused_layer_writes_without_gathering_and_must_be_served(tiny_llama):
    import mlx.core as mx

    from app.workloads.paged_cache import PagedStep
    from pool import PagedKVPool, PoolConfig

    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=4, slab_blocks=2))
    pool.add_sequence(0)
    kv = mx.ones((1, 2, 1, 16))
    step = PagedStep(pool, [0], [0], 1, batched=True)
    step.set_fused([True, False], kernel=object())
    keys, values = step.caches()[0].update_and_fetch(kv, kv)
    assert keys is kv and values is kv and pool.gathers == 0  # written, not gathered
    assert pool.step_view([0]).lengths[0] == 1 and step.caches()[1].fused is False
    step.caches()[1].update_and_fetch(kv, kv)
    assert pool.gathers == 1
    with pytest.raises(RuntimeError, match=r"fused layers \[0\] were never attended"):
        step.check_served()
    with pytest.raises(ValueError, match="one-token decode"):
        PagedStep(pool, [0], [1], 2, batched=False).set_fused([True, True], kernel=object())


def test_paged_sdpa_defers_to_mlx_lm_and_install_is_refcounted(tiny_llama):
    import mlx.core as mx
    import mlx_lm.models.base as base

    from app.workloads.fused_attention import install_paged_sdpa, uninstall_paged_sdpa

    module = __import__(type(tiny_llama.model).__module__, fromlist=["x"])
    first, second = install_paged_sdpa(tiny_llama.model), install_paged_sdpa(tiny_llama.model)
    try:
        paged = module.scaled_dot_product_attention
        assert paged is not base.scaled_dot_product_attention and paged.paged_original is base.scaled_dot_product_attention
        q, k = mx.random.normal((1, 4, 3, 16)), mx.random.normal((1, 2, 5, 16))
        expected = base.scaled_dot_product_attention(q, k, k, cache=None, scale=0.25, mask=None)
        assert mx.array_equal(paged(q, k, k, cache=None, scale=0.25, mask=None), expected)
        uninstall_paged_sdpa(second)
        assert module.scaled_dot_product_attention is paged  # still installed once
    finally:
        uninstall_paged_sdpa(first)
    assert module.scaled_dot_product_attention is base.scaled_dot_product_attention


def test_a_model_module_without_the_name_is_not_routable():
    from app.workloads.fused_attention import install_paged_sdpa

    class Opaque:  # defined here: its module has no scaled_dot_product_attention
        pass

    assert install_paged_sdpa(Opaque()) is None


class EmulatedBuilds:
    """Kernel builds whose readiness the test controls (no compiler): every slab count is "compiling" until
    ``ready_after`` readiness questions have been asked, then ready. Records prefetches and questions."""

    def __init__(self, ready_after: int):
        self.ready_after = ready_after
        self.asked: list[int] = []
        self.prefetched: list[int] = []

    def geometry_for(self, **geometry):
        return tuple(sorted(geometry.items()))

    def pending_reason(self, geometry, num_slabs):
        self.asked.append(num_slabs)
        return None if len(self.asked) > self.ready_after else f"kernel for {num_slabs} slabs compiling"

    def prefetch(self, geometry, num_slabs, reached=True):
        self.prefetched.append((num_slabs, reached))

    def stats(self):
        return {"mode": "emulated", "asked": len(self.asked)}


@pytest.mark.numerics
def test_decode_gathers_with_the_compiling_reason_until_the_kernel_is_built(tiny_llama, fake_metal, tmp_path,
                                                                           monkeypatch):
    """Readiness emulated on CPU: while the slab-count variant builds, the decision is gather with the reason
    "kernel for N slabs compiling" (an event per layer, counted by reason); once built, fused. Prefill asked the
    builds to prefetch the kernels of the slab counts the pool grew through; the logits match the all-gather run's
    (within the float32 reorder tolerance, same tokens)."""
    make_route, calls = fake_metal
    scenario = write_scenario(tmp_path, BURST)
    layers = tiny_llama.num_layers
    # two decode steps' worth of questions: one per step, for every layer (pool.fused_decision)
    builds = EmulatedBuilds(ready_after=2)
    route = make_route()
    route.builds = builds
    summary, events, logits = run_backend(tiny_llama, scenario, "slab", kernel_route=route, **POOL)
    decode = _decode_steps(events)
    fused = [e for e in events if isinstance(e, FusedChange) and e.layer == 0]
    assert not fused[0].use_fused and fused[0].reason.startswith("kernel for ")
    assert fused[0].reason.endswith(" slabs compiling")
    assert fused[-1].use_fused and fused[-1].reason.startswith("fused metal kernel (")
    reasons = summary["fused_decode"]["reasons"]
    compiling = sum(n for r, n in reasons.items() if r.endswith("slabs compiling"))
    assert compiling == 2 * layers and summary["pool"]["counters"]["gather_decisions"] == 2 * layers
    assert len(calls) == (len(decode) - 2) * layers  # the kernel ran only once it was built
    assert len(builds.asked) == len(decode)  # the rule ran once per step for every layer (equal slab counts)
    assert summary["fused_decode"]["build"] == {"mode": "emulated", "asked": len(builds.asked)}
    reached = [n for n, actual in builds.prefetched if actual]
    projected = [n for n, actual in builds.prefetched if not actual]
    assert reached and max(reached) >= 2 and all(n > 0 for n in reached)  # prefill prefetched as the pool grew
    assert projected and max(projected) >= max(reached)  # admission prefetched the final slab count
    monkeypatch.setenv("SLABSCOPE_PAGED_ATTENTION_NATIVE", "0")
    _, _, gather_logits = run_backend(tiny_llama, scenario, "slab", kernel_route=make_route(), **POOL)
    _assert_fused_matches_gather(logits, gather_logits, "compiling-then-fused vs all-gather")
