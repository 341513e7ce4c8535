"""Per-step host work of the paged backend: one step view and one fused launch plan serve every layer (one row
space: the tables are the same in every layer by construction), checked against a fresh plan; and the batched
write through slots resolved once."""

import numpy as np
import pytest

from probes.events import GatherRuns, Step

from .helpers import assert_same_logits, run_backend, write_scenario
from .test_fused_decode import BURST, POOL, fake_metal  # noqa: F401 (fixture)
from pool_writes import write_batch_kv, write_kv


def _filled_pool(num_layers=3, lengths=(9, 14, 5)):
    import mlx.core as mx

    from pool import PagedKVPool, PoolConfig

    mx.random.seed(0)  # two pools built by this helper hold the same bytes
    pool = PagedKVPool(PoolConfig(num_layers=num_layers, block_size=4, slab_blocks=2))
    for seq_id, n in enumerate(lengths):
        pool.add_sequence(seq_id)
        pool.prepare_write(seq_id, 0, n)
        for layer in range(num_layers):
            kv = mx.random.normal((n, 2, 16))
            write_kv(pool, layer, seq_id, 0, kv, kv + 1)
    return pool


def test_one_plan_per_step_serves_every_layer_and_equals_a_fresh_one():
    import mlx.core as mx

    from app.workloads.paged_cache import PagedStep
    from pool.kernels.paged_decode import plan_for_pool

    pool = _filled_pool()
    step = PagedStep(pool, [0, 1, 2], [9, 14, 5], 1, batched=True)
    step.set_fused([True] * 3, _RecordingKernel())
    queries = mx.zeros((3, 2, 1, 16))
    for layer in range(3):
        step.fused_attention(layer, queries, 0.25)
    plans = step.kernel.plans
    assert len({id(plan) for plan in plans}) == 1 and len(step.plans) == 1
    fresh = plan_for_pool(pool, [0, 1, 2], scale=0.25)
    assert np.array_equal(plans[0].meta, fresh.meta) and np.array_equal(np.array(step.plans[0.25].meta), fresh.meta)
    view = step.view
    assert view.rows == tuple(tuple(pool.book.table(s).rows) for s in (0, 1, 2)) and view.lengths == (10, 15, 6)
    step.fused_attention(0, queries, 0.5)  # another scale: another plan
    assert len(step.plans) == 2 and step.kernel.plans[-1] is not plans[0]


class _RecordingKernel:
    """A KernelRoute stand-in taking plans: records them, returns the queries."""

    backend, accepts_plan, accepts_launches = "metal", True, False

    def __init__(self):
        self.plans = []

    def run(self, pool, layer, seq_ids, queries, *, scale, backend, plan, meta):
        self.plans.append(plan)
        return queries


def test_write_batch_stores_what_per_sequence_writes_store_and_an_error_writes_nothing():
    import mlx.core as mx

    from pool import PoolError

    a, b = _filled_pool(), _filled_pool()
    for pool in (a, b):
        for seq_id, n in enumerate((9, 14, 5)):
            pool.prepare_write(seq_id, n, 1)
    keys = mx.random.normal((3, 1, 2, 16))
    write_batch_kv(a, 1, [0, 1, 2], [9, 14, 5], keys, keys * 2)
    for i, start in enumerate((9, 14, 5)):
        write_kv(b, 1, i, start, keys[i], keys[i] * 2)
    for seq_id in range(3):
        ga, gb = a.gather_visible(1, seq_id), b.gather_visible(1, seq_id)
        assert mx.array_equal(ga.keys, gb.keys) and mx.array_equal(ga.values, gb.values)
    before = [mx.array(s) for s in a.storage.keys[1]]
    with pytest.raises(PoolError, match="not prepared"):
        write_batch_kv(a, 1, [0, 1, 2], [10, 15, 6], keys + 5, keys)  # sequence 0 ok, the rest unprepared
    assert all(mx.array_equal(x, y) for x, y in zip(before, a.storage.keys[1]))  # nothing written, not even seq 0


@pytest.mark.numerics
def test_a_plan_taking_kernel_gets_one_correct_plan_per_step_and_the_same_logits(tiny_qwen3, fake_metal, tmp_path,
                                                                                 monkeypatch):
    """The step's one plan equals a fresh plan of every layer, and the emulated kernel given it computes the same
    bytes as when each layer plans from the step view itself (the same arithmetic on the same meta)."""
    from app.workloads.fused_attention import KernelRoute
    from pool.kernels.paged_decode import plan_for_pool

    make_route, _ = fake_metal
    route = make_route()
    seen = []

    def planned(pool, layer, seq_ids, queries, *, scale, backend, plan, meta, launches):
        fresh = plan_for_pool(pool, seq_ids, scale=scale)
        assert np.array_equal(plan.meta, fresh.meta) and np.array_equal(np.array(meta), fresh.meta)
        assert (plan.num_splits, plan.num_slabs, plan.slab_blocks) == (fresh.num_splits, fresh.num_slabs,
                                                                       fresh.slab_blocks)
        seen.append(id(plan))
        return route.run(pool, layer, seq_ids, queries, scale=scale, backend=backend, plan=plan, meta=meta,
                         launches=launches)

    scenario = write_scenario(tmp_path, BURST)
    planned_route = KernelRoute(run=planned, register=route.register, backend="metal")
    assert planned_route.accepts_plan is False and KernelRoute().accepts_plan is True
    planned_route.accepts_plan = planned_route.accepts_launches = True
    _, events, logits = run_backend(tiny_qwen3, scenario, "slab", kernel_route=planned_route, **POOL)
    _, _, reference = run_backend(tiny_qwen3, scenario, "slab", kernel_route=make_route(plans=False), **POOL)
    decode = [e for e in events if isinstance(e, Step) and e.type == "decode"]
    assert len(seen) == len(decode) * tiny_qwen3.num_layers
    assert len(set(seen)) <= len(decode)  # one plan per step, shared by every layer
    assert_same_logits(logits, reference, "plan-taking route vs per-layer route")


def test_a_step_served_by_one_plan_counts_the_same_runs_as_the_per_layer_route(tiny_qwen3, fake_metal, tmp_path):
    # a step counts its runs once from its view, whichever route its layers took: the gather events of the
    # plan-taking route and of the route whose layers plan for themselves must agree, sequence by sequence
    make_route, _ = fake_metal
    scenario = write_scenario(tmp_path, BURST)
    runs = lambda events: [(e.seq_ids, e.runs_layer0, e.runs_max, e.fused_layers)  # noqa: E731
                           for e in events if isinstance(e, GatherRuns)]
    _, planned_events, _ = run_backend(tiny_qwen3, scenario, "slab", kernel_route=make_route(), **POOL)
    _, reference_events, _ = run_backend(tiny_qwen3, scenario, "slab", kernel_route=make_route(plans=False),
                                         **POOL)
    counted = runs(planned_events)
    assert counted == runs(reference_events) and counted
    assert len({tuple(first) for _, first, _, _ in counted}) > 1  # the counts move as the tables grow
    assert any(len(set(first)) > 1 for _, first, _, _ in counted)  # and differ between sequences of one step
