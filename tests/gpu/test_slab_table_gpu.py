"""The CUDA table route (pool/kernels/slab_table.py) on the GPU: the decode kernel reads every slab through the
layer's device table of slab addresses, refreshed by the table-update kernel. Against the per-slab route
(SLABSCOPE_SLAB_TABLE=0: every slab a kernel input) it must give the same bits; against gather it must follow decode
writes that MLX cannot donate (a reference held to the old slab: the write makes a new buffer, so a stale entry
would read the old one, which lacks the token), growth, a prefill, copy-on-write and a shrink's compaction. The
CPU half (refresh rule, emulation, launch arguments) is in tests/workloads/test_slab_table.py and
test_cuda_launch_host.py."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

CUDA = mx.default_device().type == mx.DeviceType.gpu and mx.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="the table route is the CUDA kernel's; this "
                                                  "machine has no CUDA device (CPU tests: test_slab_table.py)")]

HEADS, N_Q, DIM, BLOCK, LAYERS = 2, 8, 64, 16, 2


def _pool(slab_blocks=1):
    from pool import PagedKVPool, PoolConfig, ShrinkPolicy

    return PagedKVPool(PoolConfig(num_layers=LAYERS, block_size=BLOCK, slab_blocks=slab_blocks,
                                  shrink=ShrinkPolicy("compact", 1 << 40, 0.5)))


def _write(pool, ids, starts, tokens, seed, peak=None):
    """``tokens`` tokens per sequence in every layer; ``peak``: K of the written tokens = peak (so a query along it
    attends almost only to them), V random."""
    for s, start in zip(ids, starts):
        pool.prepare_write(s, start, tokens)
    slots = pool.write_slots(ids, starts, tokens)
    for layer in range(LAYERS):
        key = mx.random.key(seed * 10 + layer)
        k = mx.random.normal((len(ids), tokens, HEADS, DIM), key=key).astype(mx.bfloat16)
        if peak is not None:
            k = mx.broadcast_to(peak, k.shape).astype(mx.bfloat16)
        v = mx.random.normal((len(ids), tokens, HEADS, DIM), key=mx.random.split(key)[0]).astype(mx.bfloat16)
        pool.write(layer, slots, k, v)


def _fused_vs_gather(pool, ids, queries, label):
    from pool.kernels.paged_decode import fused_decode, gather_decode, plan_for_pool

    plan, launches = plan_for_pool(pool, ids, scale=DIM ** -0.5), {}
    for layer in range(LAYERS):
        out = fused_decode(pool, layer, ids, queries, scale=DIM ** -0.5, backend="cuda", plan=plan,
                           launches=launches)
        ref = gather_decode(pool, layer, ids, queries, scale=DIM ** -0.5, upcast=True)
        err = (mx.abs(out.astype(mx.float32) - ref).max() / mx.abs(ref).max()).item()
        assert err <= 2.0 ** -7, f"{label}, layer {layer}: relative error {err:.3g}"


def test_table_route_equals_the_per_slab_route_bit_for_bit(monkeypatch):
    from pool.kernels.paged_decode import fused_decode, plan_for_pool

    pool = _pool()
    lengths = [2400, 1000, 3200]
    for s, n in enumerate(lengths):
        pool.add_sequence(s)
        _write(pool, [s], [0], n, seed=s)
    assert 300 < pool.num_slabs() <= 512
    queries = mx.random.normal((3, N_Q, 1, DIM), key=mx.random.key(3)).astype(mx.bfloat16) * 2
    plan = plan_for_pool(pool, [0, 1, 2], scale=0.125)
    table = fused_decode(pool, 0, [0, 1, 2], queries, scale=0.125, backend="cuda", plan=plan)
    monkeypatch.setenv("SLABSCOPE_SLAB_TABLE", "0")
    per_slab = fused_decode(pool, 0, [0, 1, 2], queries, scale=0.125, backend="cuda", plan=plan)
    assert mx.array_equal(table, per_slab)


def test_table_route_follows_undonated_writes_growth_prefill_cow_and_shrink():
    pool = _pool(slab_blocks=2)
    lengths = {0: 40, 1: 100, 2: 17}
    for s, n in lengths.items():
        pool.add_sequence(s)
        _write(pool, [s], [0], n, seed=s)
    ids = [0, 1, 2]
    peak = mx.random.normal((DIM,), key=mx.random.key(11))
    queries = (mx.broadcast_to(peak, (len(ids), N_Q, 1, DIM)) * 0.5).astype(mx.bfloat16)
    _fused_vs_gather(pool, ids, queries, "prefill")
    for step in range(40):
        held = [list(pool.slabs(layer)[0]) for layer in range(LAYERS)]  # no donation: every write a new buffer
        _write(pool, ids, [lengths[s] for s in ids], 1, seed=100 + step, peak=peak * 3)
        for s in ids:
            lengths[s] += 1
        _fused_vs_gather(pool, ids, queries, f"decode step {step}")
        del held
    pool.add_sequence(3)
    _write(pool, [3], [0], 50, seed=7)
    lengths[3] = 50
    pool.clone(1, 4, lengths[1])
    _write(pool, [4], [lengths[1]], 1, seed=8, peak=peak * 3)
    lengths[4] = lengths[1] + 1
    ids = [0, 1, 2, 3, 4]
    queries = (mx.broadcast_to(peak, (len(ids), N_Q, 1, DIM)) * 0.5).astype(mx.bfloat16)
    _fused_vs_gather(pool, ids, queries, "prefill and copy-on-write")
    for gone in (0, 2, 3):
        pool.release(gone)
    pool.shrink()
    ids = [1, 4]
    _fused_vs_gather(pool, ids, queries[:2], "after the shrink")
    pool.check_integrity()
