"""The CUDA launch's host side, on CPU: what ``paged_decode_cuda`` hands ``mx.fast.precompiled_cuda_kernel`` (kernel
names and binaries, inputs with the bucket's padding, grid, output shapes, the merge pass's split count), and that
the layers of a step derive their kernel variants once (``launch_binaries``), not once per launch. MLX's kernel
call is replaced by a recorder; binaries come from ``KernelBuilds`` with a fake compiler (no GPU, no NVRTC)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("num_splits", [1, 3])
def test_launch_arguments_and_one_variant_derivation_for_every_layer(tmp_path, monkeypatch, num_splits):
    import mlx.core as mx

    import pool.kernels.cuda_builds as cb
    from pool.kernels import paged_decode_cuda as cu
    from pool.kernels.kernel_cache import KernelCache
    from pool.kernels.nvrtc import CompileResult
    from pool.kernels.plan import plan_decode

    compile_fn = lambda source, sm: CompileResult(source[-40:].encode(), "cubin", "sm_90", 0.0)  # noqa: E731
    builds = cb.KernelBuilds(90, cache=KernelCache(str(tmp_path)), compiler=compile_fn)
    monkeypatch.setattr(cb, "process_builds", lambda environ=None: builds)
    calls = []

    def recorder(**kwargs):
        calls.append(kwargs)
        return [mx.zeros(shape, dtype=dtype) for shape, dtype in zip(kwargs["output_shapes"], kwargs["output_dtypes"])]

    monkeypatch.setattr(mx.fast, "precompiled_cuda_kernel", recorder, raising=False)
    derived = []
    geometry_of = cu.kernel_geometry
    monkeypatch.setattr(cu, "kernel_geometry", lambda *args: derived.append(args) or geometry_of(*args))
    cu.launch_binaries.cache_clear()

    # bf16, head_dim 64, 4 query heads on 2 KV heads, 16-token blocks, 3 slabs of 4 rows (bucket 4: slab 0 pads)
    slabs = [[mx.zeros((4, 2, 16, 64), dtype=mx.bfloat16) for _ in range(3)] for _ in range(2)]
    queries = mx.zeros((2, 4, 1, 64), dtype=mx.bfloat16)
    plan = plan_decode([[0, 5], [9, 10, 11]], [20, 40], None, block_size=16, slab_blocks=4, num_slabs=3,
                       n_kv_heads=2, scale=0.125, num_splits=num_splits)
    assert plan.num_splits == num_splits
    for _ in range(3):  # three layers of one step (the same slabs: only the host side is under test)
        assert cu.paged_decode_cuda(queries, slabs[0], slabs[1], plan).shape == queries.shape
    assert len(derived) == 1  # one derivation of the variants for the step's three launches
    variants = geometry_of("bfloat16", 64, 4, 2, 16).variants(4)
    direct = num_splits == 1
    per_launch = 1 if direct else 2
    assert len(calls) == 3 * per_launch
    first = calls[0]
    assert (first["name"], first["compiled_source"]) == builds.binary(variants[0 if direct else 1])
    keys, values = slabs
    assert [id(a) for a in first["inputs"][2:]] == [id(a) for a in (*keys, keys[0], *values, values[0])]
    assert first["inputs"][0] is queries and first["inputs"][1].tolist() == plan.meta.tolist()  # no reshape op
    assert first["grid"] == (cu.THREADS * num_splits, 2, 2)
    assert first["output_shapes"] == ([(2, 4, 1, 64)] if direct else [(2, 4, num_splits, 64), (2, 4, num_splits, 2)])
    if not direct:
        merge = calls[1]
        assert (merge["name"], merge["compiled_source"]) == builds.binary(variants[2])
        assert merge["scalars"] == [num_splits] and merge["grid"] == (64, 4, 2)
    assert all(call["name"] == calls[i % per_launch]["name"] for i, call in enumerate(calls))


def test_a_prepared_launch_serves_every_layer_it_fits_and_a_layer_that_does_not_gets_its_own(tmp_path, monkeypatch):
    """``fused_decode(..., launches=)``: the launch prepared at a plan's first layer (inputs checked, variants found)
    is reused by the next layers, each launching on its own slabs; a layer with another slab count, or another
    plan, is prepared anew (and checked in full)."""
    import mlx.core as mx

    import pool.kernels.cuda_builds as cb
    from pool.kernels import paged_decode_cuda as cu
    from pool.kernels.kernel_cache import KernelCache
    from pool.kernels.nvrtc import CompileResult
    from pool.kernels.paged_decode import fused_decode
    from pool.kernels.plan import KernelUnsupported, plan_decode

    monkeypatch.setenv("SLABSCOPE_SLAB_TABLE", "0")  # the per-slab route; the table route's launch is tested below
    compile_fn = lambda source, sm: CompileResult(source[-40:].encode(), "cubin", "sm_90", 0.0)  # noqa: E731
    builds = cb.KernelBuilds(90, cache=KernelCache(str(tmp_path)), compiler=compile_fn)
    monkeypatch.setattr(cb, "process_builds", lambda environ=None: builds)
    calls, checks = [], []

    def recorder(**kwargs):
        calls.append(kwargs)
        return [mx.zeros(shape, dtype=dtype) for shape, dtype in zip(kwargs["output_shapes"], kwargs["output_dtypes"])]

    monkeypatch.setattr(mx.fast, "precompiled_cuda_kernel", recorder, raising=False)
    check_inputs = cu.check_inputs
    monkeypatch.setattr(cu, "check_inputs", lambda *args: checks.append(args) or check_inputs(*args))

    def slabs(count):
        return [mx.zeros((4, 2, 16, 64), dtype=mx.bfloat16) for _ in range(count)]

    layers = {0: (slabs(3), slabs(3)), 1: (slabs(3), slabs(3)), 2: (slabs(4), slabs(4))}

    class Layers:  # the one pool method a planned launch reads
        def slabs(self, layer):
            return layers[layer]

    def plan_for(num_slabs):
        return plan_decode([[0, 5], [9, 10, 11]], [20, 40], None, block_size=16, slab_blocks=4, num_slabs=num_slabs,
                           n_kv_heads=2, scale=0.125, num_splits=1)

    queries = mx.zeros((2, 4, 1, 64), dtype=mx.bfloat16)
    plan3, launches = plan_for(3), {}
    for layer in (0, 1):
        out = fused_decode(Layers(), layer, [0, 1], queries, scale=0.125, backend="cuda", plan=plan3, launches=launches)
        assert out.shape == queries.shape
    assert len(checks) == 1 and len(calls) == 2  # prepared once, launched twice
    keys, values = layers[1]
    assert [id(a) for a in calls[1]["inputs"][2:]] == [id(a) for a in (*keys, keys[0], *values, values[0])]
    with pytest.raises(KernelUnsupported, match="another slab geometry"):
        fused_decode(Layers(), 2, [0, 1], queries, scale=0.125, backend="cuda", plan=plan3, launches=launches)
    assert len(checks) == 2  # 4 slabs do not fit the 3-slab launch: prepared anew, and its check refuses the plan
    fused_decode(Layers(), 2, [0, 1], queries, scale=0.125, backend="cuda", plan=plan_for(4), launches=launches)
    assert len(checks) == 3 and len(calls[-1]["inputs"]) == 2 + 2 * 4
    fused_decode(Layers(), 0, [0, 1], queries, scale=0.125, backend="cuda", plan=plan_for(3), launches=launches)
    assert len(checks) == 4  # another plan object: never another plan's launch


def test_the_plan_carries_the_tuning_that_picks_the_launched_variant(tmp_path, monkeypatch):
    """Kernel knobs are arguments: a plan made with ``KernelTuning(unroll=4)`` launches the unroll-4 variant and the
    default plan the default's, whatever the environment says (the variables that set them once are read no more)."""
    import mlx.core as mx

    import pool.kernels.cuda_builds as cb
    from pool.kernels import paged_decode_cuda as cu
    from pool.kernels.kernel_cache import KernelCache
    from pool.kernels.nvrtc import CompileResult
    from pool.kernels.plan import plan_decode
    from pool.kernels.tuning import DEFAULT_TUNING, KernelTuning

    compile_fn = lambda source, sm: CompileResult(source[-40:].encode(), "cubin", "sm_90", 0.0)  # noqa: E731
    builds = cb.KernelBuilds(90, cache=KernelCache(str(tmp_path)), compiler=compile_fn)
    monkeypatch.setattr(cb, "process_builds", lambda environ=None: builds)
    names = []

    def recorder(**kwargs):
        names.append(kwargs["name"])
        return [mx.zeros(shape, dtype=dtype) for shape, dtype in zip(kwargs["output_shapes"], kwargs["output_dtypes"])]

    monkeypatch.setattr(mx.fast, "precompiled_cuda_kernel", recorder, raising=False)
    monkeypatch.setenv("SLABSCOPE_CUDA_UNROLL", "2")
    cu.launch_binaries.cache_clear()
    slabs = [[mx.zeros((4, 2, 32, 128), dtype=mx.bfloat16) for _ in range(3)] for _ in range(2)]
    queries = mx.zeros((2, 4, 1, 128), dtype=mx.bfloat16)
    expected = {}
    for tuning in (KernelTuning(unroll=4), DEFAULT_TUNING):
        plan = plan_decode([[0, 5], [9, 10, 11]], [40, 80], None, block_size=32, slab_blocks=4, num_slabs=3,
                           n_kv_heads=2, scale=0.125, num_splits=1, tuning=tuning)
        assert plan.tuning is tuning
        cu.paged_decode_cuda(queries, slabs[0], slabs[1], plan)
        direct = cu.kernel_geometry("bfloat16", 128, 4, 2, 32, tuning.unroll).variants(4)[0]
        assert direct.unroll == tuning.unroll
        expected[tuning.unroll] = builds.binary(direct)[0]
    assert names == [expected[4], expected[8]] and expected[4] != expected[8]
    with pytest.raises(ValueError, match="unroll 3"):
        KernelTuning(unroll=3)


def _table_route_recorder(tmp_path, monkeypatch):
    """The table route's launches recorded: (calls, outputs) with MLX's kernel call replaced (fake binaries)."""
    import mlx.core as mx

    import pool.kernels.cuda_builds as cb
    from pool.kernels.kernel_cache import KernelCache
    from pool.kernels.nvrtc import CompileResult

    monkeypatch.delenv("SLABSCOPE_SLAB_TABLE", raising=False)
    compile_fn = lambda source, sm: CompileResult(source[-40:].encode(), "cubin", "sm_90", 0.0)  # noqa: E731
    builds = cb.KernelBuilds(90, cache=KernelCache(str(tmp_path)), compiler=compile_fn)
    monkeypatch.setattr(cb, "process_builds", lambda environ=None: builds)
    calls, outputs = [], []

    def recorder(**kwargs):
        out = [mx.zeros(shape, dtype=dtype) for shape, dtype in zip(kwargs["output_shapes"], kwargs["output_dtypes"])]
        calls.append(kwargs)
        outputs.append(out)
        return out

    monkeypatch.setattr(mx.fast, "precompiled_cuda_kernel", recorder, raising=False)
    return calls, outputs


def _bf16_pool(lengths, slab_blocks):
    import mlx.core as mx

    from pool import PagedKVPool, PoolConfig

    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=16, slab_blocks=slab_blocks))
    for seq_id, n in enumerate(lengths):
        pool.add_sequence(seq_id)
        pool.prepare_write(seq_id, 0, n)
        slots = pool.write_slots([seq_id], [0], n)
        for layer in range(2):
            kv = mx.ones((1, n, 2, 64), dtype=mx.bfloat16)
            pool.write(layer, slots, kv, kv)
    return pool


@pytest.mark.parametrize("slab_blocks", [4, 1])
def test_table_route_launch_takes_three_inputs_and_orders_after_the_writes(tmp_path, monkeypatch, slab_blocks):
    """The table route (default on CUDA): the decode launch's inputs are queries, meta and the layer's table at any
    slab count (one kernel name); the table update takes the previous table and the refreshed slabs as inputs
    (what orders it after their writes), and its output is the decode launch's table."""
    import mlx.core as mx

    from pool.kernels.paged_decode import fused_decode, plan_for_pool
    from pool.kernels.slab_table import table_capacity, write_bucket

    calls, outputs = _table_route_recorder(tmp_path, monkeypatch)
    lengths = [40, 70]
    pool = _bf16_pool(lengths, slab_blocks)
    count = pool.num_slabs()
    queries = mx.zeros((2, 4, 1, 64), dtype=mx.bfloat16)
    plan, launches = plan_for_pool(pool, [0, 1], scale=0.125), {}
    for layer in (0, 1):
        fused_decode(pool, layer, [0, 1], queries, scale=0.125, backend="cuda", plan=plan, launches=launches)
    updates = [c for c in calls if c["name"].startswith("ssp_pd_table_w")]
    decodes = [c for c in calls if c["name"].startswith("ssp_pd_direct_s0_")]
    assert len(decodes) == 2 and all(len(c["inputs"]) == 3 for c in decodes)
    assert -(-count // 64) * 2 == len(updates)  # every slab once per layer, groups of at most 64
    first = updates[0]
    width = write_bucket(min(count, 64))
    assert first["name"].startswith(f"ssp_pd_table_w{width}_") and len(first["inputs"]) == 2 + 2 * width
    assert first["scalars"] == [0, 2 * table_capacity(count)] and first["output_shapes"] == [(2 * table_capacity(count),)]
    assert first["output_dtypes"] == [mx.uint64]
    assert first["inputs"][1].tolist()[:min(count, 64)] == list(range(min(count, 64)))
    keys, values = pool.slabs(0)
    assert [id(a) for a in first["inputs"][2:2 + min(count, 64)]] == [id(k) for k in keys[:64]]
    # the layer's decode launch reads the last update's output
    first_decode = next(i for i, c in enumerate(calls) if c["name"].startswith("ssp_pd_direct_s0_"))
    assert calls[first_decode - 1]["name"].startswith("ssp_pd_table_w")
    assert decodes[0]["inputs"][2] is outputs[first_decode - 1][0]
    layer0_table = decodes[0]["inputs"][2]
    # a decode step: each sequence's tail slab written, then refreshed from the previous table
    calls.clear(), outputs.clear()
    for seq_id, n in enumerate(lengths):
        pool.prepare_write(seq_id, n, 1)
    slots = pool.write_slots([0, 1], lengths, 1)
    kv = mx.ones((2, 1, 2, 64), dtype=mx.bfloat16)
    previous = launches  # the step's launches dict is new per step in the live path
    plan2, launches = plan_for_pool(pool, [0, 1], scale=0.125), {}
    for layer in (0, 1):
        pool.write(layer, slots, kv, kv)
        fused_decode(pool, layer, [0, 1], queries, scale=0.125, backend="cuda", plan=plan2, launches=launches)
    names = [c["name"].split("_")[2] for c in calls]
    assert names == ["table", "direct", "table", "direct"] and previous is not launches
    tails = sorted({pool.book.table(s).rows[n // 16] // slab_blocks for s, n in enumerate(lengths)})
    update, decode = calls[0], calls[1]
    assert update["inputs"][1].tolist() == tails + [tails[0]] * (write_bucket(len(tails)) - len(tails))
    keys, values = pool.slabs(0)
    assert [id(a) for a in update["inputs"][2:]] == [id(x) for x in
                                                     [keys[t] for t in update["inputs"][1].tolist()]
                                                     + [values[t] for t in update["inputs"][1].tolist()]]
    assert decode["inputs"][2] is outputs[0][0] and len(decode["inputs"]) == 3
    assert update["inputs"][0] is layer0_table  # copy the previous table, overwrite the written entries
    assert update["scalars"] == [2 * table_capacity(count)] * 2
