"""The CUDA table gather (pool/kernels/table_gather_cuda.py) on the GPU: one launch per layer copies a sequence's
visible K/V out of hundreds of slabs through the slab table. It must equal the storage's per-run gather bit for bit
(both builds: NVRTC and MLX's JIT; head_dim 128 and 64, so 16-byte chunks per head row of 16 and 8; a window with
partial first and last blocks), and follow a prefill chunk written just before it in the same layer, including a
write MLX cannot donate (a held reference: the slab gets a new buffer the table must be refreshed to). The CPU half
is tests/workloads/test_table_gather.py."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

CUDA = mx.default_device().type == mx.DeviceType.gpu and mx.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="the table gather is a CUDA kernel; this "
                                                  "machine has no CUDA device (CPU tests: test_table_gather.py)")]

BLOCK, LAYERS = 16, 2


def _pool(slab_blocks):
    from pool import PagedKVPool, PoolConfig

    return PagedKVPool(PoolConfig(num_layers=LAYERS, block_size=BLOCK, slab_blocks=slab_blocks))


def _write(pool, ids, starts, tokens, seed, heads, dim):
    for s, start in zip(ids, starts):
        pool.prepare_write(s, start, tokens)
    slots = pool.write_slots(ids, starts, tokens)
    for layer in range(LAYERS):
        key = mx.random.key(seed * 10 + layer)
        k = mx.random.normal((len(ids), tokens, heads, dim), key=key).astype(mx.bfloat16)
        v = mx.random.normal((len(ids), tokens, heads, dim), key=mx.random.split(key)[0]).astype(mx.bfloat16)
        pool.write(layer, slots, k, v)


def _route(builds):
    from pool.kernels.paged_decode import table_kernel
    from pool.kernels.table_gather import TableGatherRoute
    from pool.kernels.table_gather_cuda import CudaTableGather

    return TableGatherRoute(table_kernel("cuda"), CudaTableGather(builds))


def _check(pool, route, seq_ids, label):
    for seq_id in seq_ids:
        table = pool.book.table(seq_id)
        rows = table.rows[:-(-table.length // BLOCK)]
        for lo, hi in ((0, table.length), (BLOCK + 3, table.length - 5)):
            for layer in range(LAYERS):
                want_k, want_v, want_runs = pool.storage.gather(layer, rows, lo, hi)
                k, v, runs = route.gather(pool.storage, layer, rows, lo, hi)
                where = f"{label}: seq {seq_id} layer {layer} [{lo}, {hi})"
                assert runs == want_runs, where
                assert mx.array_equal(k, want_k).item() and mx.array_equal(v, want_v).item(), where


@pytest.mark.parametrize("build", ["nvrtc", "mlx"])
@pytest.mark.parametrize("heads,dim", [(8, 128), (4, 64)])
def test_table_gather_equals_the_per_run_gather_bit_for_bit(monkeypatch, build, heads, dim):
    from pool.kernels.cuda_builds import process_builds

    builds = process_builds() if build == "nvrtc" else None
    if build == "nvrtc" and builds is None:
        pytest.skip("NVRTC is not loadable here")
    route = _route(builds)
    pool = _pool(slab_blocks=2)
    lengths = {0: 1500, 1: 700, 2: 2300}
    for seq_id in lengths:  # chunked and interleaved: every table jumps between many slabs
        pool.add_sequence(seq_id)
    for start in range(0, 2300, 256):
        for seq_id, n in lengths.items():
            if start < n:
                _write(pool, [seq_id], [start], min(256, n - start), seed=seq_id + start, heads=heads, dim=dim)
    assert pool.num_slabs() > 100
    _check(pool, route, list(lengths), "interleaved chunks")
    held = pool.storage.keys[0][-1]  # a held reference: the next write into that slab cannot donate its buffer
    pool.add_sequence(3)
    _write(pool, [3], [0], 100, seed=77, heads=heads, dim=dim)
    _check(pool, route, [3], "after a write MLX could not donate")
    del held


@pytest.mark.parametrize("build", ["nvrtc", "mlx"])
@pytest.mark.parametrize("heads,dim", [(8, 128), (4, 64)])
def test_a_batch_read_in_one_launch_equals_each_sequence_gathered(monkeypatch, build, heads, dim):
    """``gather_batch``'s launch: three sequences of one length (a partial last block) read into ``[B, H, T, D]``;
    sequence ``b``'s slice equals its own per-run gather, bit for bit."""
    from pool.kernels.cuda_builds import process_builds

    builds = process_builds() if build == "nvrtc" else None
    if build == "nvrtc" and builds is None:
        pytest.skip("NVRTC is not loadable here")
    route = _route(builds)
    pool = _pool(slab_blocks=2)
    ids, length = [2, 0, 1], 1000
    for seq_id in ids:
        pool.add_sequence(seq_id)
    for start in range(0, length, 256):  # the batch's chunks: rows interleave across slabs
        _write(pool, ids, [start] * 3, min(256, length - start), seed=start, heads=heads, dim=dim)
    per_sequence = [pool.book.table(s).rows[:-(-length // BLOCK)] for s in ids]
    for layer in range(LAYERS):
        keys, values, runs = route.gather_batch(pool.storage, layer, per_sequence, 0, length)
        assert keys.shape == (3, heads, length, dim)
        for b, rows in enumerate(per_sequence):
            want_k, want_v, want_runs = pool.storage.gather(layer, rows, 0, length)
            assert runs[b] == want_runs
            assert mx.array_equal(keys[b], want_k).item(), f"layer {layer} sequence {b}: K"
            assert mx.array_equal(values[b], want_v).item(), f"layer {layer} sequence {b}: V"
