"""Per-step host work of the paged backend: one fused launch plan shared by the layers it fits (verified against a
fresh plan for every layer, and rebuilt when a layer's tables differ), and the batched per-layer write."""

import numpy as np
import pytest

from probes.events import GatherRuns, Step

from .helpers import assert_same_logits, run_backend, write_scenario
from .test_fused_decode import BURST, POOL, fake_metal  # noqa: F401 (fixture)


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
            pool.write(layer, seq_id, 0, kv, kv + 1)
    return pool


def _plan(plans, layer, scale):
    entry = plans.entry(layer, scale)
    return entry.plan, entry.meta


def test_one_plan_serves_layers_with_equal_tables_and_a_differing_layer_gets_its_own():
    from app.workloads.step_plans import StepPlans
    from pool.kernels.paged_decode import plan_for_pool

    pool = _filled_pool()
    plans = StepPlans(pool, [0, 1, 2])
    first, meta = _plan(plans, 0, 0.25)
    assert np.array_equal(np.array(meta), first.meta)
    for layer in (1, 2):
        plan, _ = _plan(plans, layer, 0.25)
        assert plan is first and np.array_equal(plan.meta, plan_for_pool(pool, layer, [0, 1, 2], scale=0.25).meta)
    assert (plans.built, plans.reused) == (1, 2)
    table = pool.book.tables(1)[2]
    saved = list(table.rows)
    table.rows[0], table.rows[1] = saved[1], saved[0]  # layer 2 now reads other rows: the plan must differ
    pool.book.versions[2] += 1  # as every row change of the book does (pool/table_match.py relies on it)
    try:
        plans = StepPlans(pool, [0, 1, 2])  # the next step (tables never change during one)
        first, _ = _plan(plans, 0, 0.25)
        plan, _ = _plan(plans, 2, 0.25)
        assert plan is not first and plans.built == 2
        assert np.array_equal(plan.meta, plan_for_pool(pool, 2, [0, 1, 2], scale=0.25).meta)
        assert _plan(plans, 1, 0.5)[0] is not first  # another scale: another plan
    finally:
        table.rows[:] = saved
        pool.book.versions[2] += 1


def test_write_batch_stores_what_per_sequence_writes_store_and_an_error_writes_nothing():
    import mlx.core as mx

    from pool import PoolError

    a, b = _filled_pool(), _filled_pool()
    for pool in (a, b):
        for seq_id, n in enumerate((9, 14, 5)):
            pool.prepare_write(seq_id, n, 1)
    keys = mx.random.normal((3, 1, 2, 16))
    a.write_batch(1, [0, 1, 2], [9, 14, 5], keys, keys * 2)
    for i, start in enumerate((9, 14, 5)):
        b.write(1, i, start, keys[i], keys[i] * 2)
    for seq_id in range(3):
        ga, gb = a.gather_visible(1, seq_id), b.gather_visible(1, seq_id)
        assert mx.array_equal(ga.keys, gb.keys) and mx.array_equal(ga.values, gb.values)
    before = [mx.array(s) for s in a.storage.keys[1]]
    with pytest.raises(PoolError, match="not prepared"):
        a.write_batch(1, [0, 1, 2], [10, 15, 6], keys + 5, keys)  # sequence 0 ok, the rest unprepared
    assert all(mx.array_equal(x, y) for x, y in zip(before, a.storage.keys[1]))  # nothing written, not even seq 0


@pytest.mark.numerics
def test_a_plan_taking_kernel_gets_per_layer_correct_plans_and_the_same_logits(tiny_qwen3, fake_metal, tmp_path,
                                                                              monkeypatch):
    """The step's shared plans equal a fresh plan of every layer, and the emulated kernel given them computes the
    same bytes as when each layer plans from its own view (the same arithmetic on the same meta)."""
    from app.workloads.fused_attention import KernelRoute
    from pool.kernels.paged_decode import plan_for_pool

    make_route, _ = fake_metal
    route = make_route()
    seen = []

    def planned(pool, layer, seq_ids, queries, *, scale, backend, plan, meta, launches):
        fresh = plan_for_pool(pool, layer, seq_ids, scale=scale)
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
    assert len(set(seen)) < len(seen)  # plans were shared across layers
    assert_same_logits(logits, reference, "plan-taking route vs per-layer route")


def test_a_step_served_by_one_plan_counts_the_same_runs_as_the_per_layer_route(tiny_qwen3, fake_metal, tmp_path):
    # a step whose layers all ran through one plan counts layer 0's runs once for every sequence (one layer view);
    # the per-layer route counts each layer's tables: the gather events must agree, sequence by sequence
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
