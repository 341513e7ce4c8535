"""The CUDA table write (pool/kernels/table_write_cuda.py) on the GPU: a decode step's tokens stored into the slabs
in place through the slab table. Against a twin pool written by MLX, after every step (growth, copy-on-write, a
write MLX cannot donate before it) the slabs hold the same bits (so every later MLX reader sees the tokens) and the
fused kernel reading the write's table gives the same bits as on the twin (both builds, head_dim 128 and 64). The
CPU half is tests/workloads/test_table_write.py."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

CUDA = mx.default_device().type == mx.DeviceType.gpu and mx.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="the table write is a CUDA kernel; this "
                                                  "machine has no CUDA device (CPU tests: test_table_write.py)")]

BLOCK, LAYERS, N_Q = 16, 2, 16


def _pools(builds):
    from pool import PagedKVPool, PoolConfig
    from pool.kernels.paged_decode import table_kernel
    from pool.kernels.table_write import TableWriteRoute
    from pool.kernels.table_write_cuda import CudaTableWrite

    config = PoolConfig(num_layers=LAYERS, block_size=BLOCK, slab_blocks=2)
    through, by_mlx = PagedKVPool(config), PagedKVPool(config)
    through.write_route = TableWriteRoute(table_kernel("cuda"), CudaTableWrite(builds))
    return through, by_mlx


def _write(pool, ids, starts, tokens, seed, heads, dim, through_table=False):
    for s, start in zip(ids, starts):
        pool.prepare_write(s, start, tokens)
    slots = pool.write_slots(ids, starts, tokens)
    for layer in range(LAYERS):
        key = mx.random.key(seed * 10 + layer)
        k = mx.random.normal((len(ids), tokens, heads, dim), key=key).astype(mx.bfloat16)
        v = mx.random.normal((len(ids), tokens, heads, dim), key=mx.random.split(key)[0]).astype(mx.bfloat16)
        pool.write(layer, slots, k, v, through_table=through_table)


def _attend_and_compare(through, by_mlx, ids, dim, label):
    from pool.kernels.paged_decode import fused_decode, plan_for_pool

    scale = dim ** -0.5
    for layer in range(LAYERS):
        queries = mx.random.normal((len(ids), N_Q, 1, dim), key=mx.random.key(layer)).astype(mx.bfloat16)
        out = [fused_decode(p, layer, ids, queries, scale=scale, backend="cuda",
                            plan=plan_for_pool(p, ids, scale=scale)) for p in (through, by_mlx)]
        mx.eval(out)  # runs the write (the kernel's table input depends on it)
        assert mx.array_equal(out[0], out[1]).item(), f"{label}: layer {layer} attention differs"
        for name in ("keys", "values"):
            for s, (x, y) in enumerate(zip(getattr(through.storage, name)[layer],
                                           getattr(by_mlx.storage, name)[layer])):
                assert mx.array_equal(x, y).item(), f"{label}: layer {layer} {name} slab {s} differs"


@pytest.mark.parametrize("build", ["nvrtc", "mlx"])
@pytest.mark.parametrize("heads,dim", [(8, 128), (4, 64)])
def test_table_write_equals_mlx_writes_bit_for_bit(build, heads, dim):
    from pool.kernels.cuda_builds import process_builds

    builds = process_builds() if build == "nvrtc" else None
    if build == "nvrtc" and builds is None:
        pytest.skip("NVRTC is not loadable here")
    through, by_mlx = _pools(builds)
    lengths = {0: 300, 1: 47, 2: 129}
    for pool in (through, by_mlx):
        for seq_id, n in lengths.items():
            pool.add_sequence(seq_id)
            _write(pool, [seq_id], [0], n, seed=seq_id, heads=heads, dim=dim)
    ids = list(lengths)
    for step in range(40):  # crosses blocks and slabs: growth between steps
        for pool, flag in ((through, True), (by_mlx, False)):
            _write(pool, ids, [lengths[s] for s in ids], 1, seed=50 + step, heads=heads, dim=dim,
                   through_table=flag)
        for s in ids:
            lengths[s] += 1
        if step % 13 == 0:
            _attend_and_compare(through, by_mlx, ids, dim, f"step {step}")
    held = [through.storage.keys[0][-1], by_mlx.storage.keys[0][-1]]  # MLX's next write there cannot donate
    for pool in (through, by_mlx):
        pool.clone(1, 3, lengths[1])  # copy-on-write at the clone's first write
    lengths[3] = lengths[1]
    for pool, flag in ((through, True), (by_mlx, False)):
        _write(pool, [3, 0], [lengths[3], lengths[0]], 1, seed=99, heads=heads, dim=dim, through_table=flag)
    _attend_and_compare(through, by_mlx, [3, 0], dim, "after copy-on-write")
    del held


@pytest.mark.parametrize("build", ["nvrtc", "mlx"])
@pytest.mark.parametrize("heads,dim", [(8, 128), (4, 64)])
def test_prefill_chunks_through_the_table_equal_mlx_writes_bit_for_bit(build, heads, dim):
    """Prefill chunks through the table: one sequence from token 0, then a batched chunk of three at one start
    (from mid-block, across blocks and slabs, to mid-block) and a chunk of two: slabs and attention equal MLX's."""
    from pool.kernels.cuda_builds import process_builds

    builds = process_builds() if build == "nvrtc" else None
    if build == "nvrtc" and builds is None:
        pytest.skip("NVRTC is not loadable here")
    through, by_mlx = _pools(builds)
    for pool, flag in ((through, True), (by_mlx, False)):
        for seq_id in (2, 0, 1):
            pool.add_sequence(seq_id)
        _write(pool, [2, 0, 1], [0, 0, 0], 40, seed=1, heads=heads, dim=dim, through_table=flag)
        _write(pool, [2, 0, 1], [40, 40, 40], 200, seed=2, heads=heads, dim=dim, through_table=flag)
        _write(pool, [1, 0], [240, 240], 77, seed=3, heads=heads, dim=dim, through_table=flag)
    assert through.write_route.launches == 3 * LAYERS
    _attend_and_compare(through, by_mlx, [2, 0, 1], dim, "after the chunks")
