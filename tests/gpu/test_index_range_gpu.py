"""A pool past 2^32 elements on a real GPU: the fused kernel's index-range guard, and the arithmetic it guards.

Geometry: block_size 32, 8 KV heads, head_dim 128, bfloat16 (qwen3-0.6b's): one row is 32,768 elements, so row
131,072 of a tensor starts exactly at element 2^32. Sequence 0 (a filler, never written) takes rows 0..131,071;
sequence 1's 256 tokens land in rows 131,072..131,079, all past 2^32, filled with random K/V. A kernel that
computed element offsets in 32 bits would read rows 0.. (zeros) instead and return zeros.

* ``test_one_tensor_past_the_index_range_is_declined``: a slab of 131,080 rows (2^32 + 262,144 elements, 8 GiB
  for K and 8 for V) or the monolithic design's one tensor. The decision rule sends the layer to gather with the
  index-range reason, the kernel entry raises ``KernelUnsupported``, and the gather path (what runs instead)
  matches attention computed straight from the written K/V.
* ``test_kernel_offsets_are_64_bit_past_the_guard``: the same pool with the entry's limit lifted (monkeypatched):
  the kernel must match the gather path. This is the hardware half of the audit in docs/sizing.md (the kernels'
  offsets are 64-bit); the guard stays until it has passed on every backend.
* ``test_many_slabs_past_2_32_in_total_run_fused``: the slab design's point. A layer of 9 slabs of 16,384 rows
  (2^29 elements each, 2^32 + 2^29 in the layer) is not one tensor past the range: the decision is fused and the
  kernel matches gather.

Each needs about 18 GiB of GPU memory; a smaller device skips with the figures. Command for the H200 (repository
root, an environment with mlx[cuda]): ``python3 -m pytest -q tests/gpu/test_index_range_gpu.py -rs``.
"""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from pool.fused_decision import detect_backend  # noqa: E402
from pool_writes import write_kv

BLOCK, N_KV, N_Q, HEAD_DIM, DTYPE = 32, 8, 16, 128, "bfloat16"
ROW_ELEMENTS = BLOCK * N_KV * HEAD_DIM
FILLER_ROWS = 2**32 // ROW_ELEMENTS           # rows 0..131,071: elements [0, 2^32)
TOKENS = 256                                  # sequence 1: 8 blocks, rows 131,072..131,079
SLAB_PAST = FILLER_ROWS + TOKENS // BLOCK     # one tensor of 2^32 + 262,144 elements
NEEDED_BYTES = 20 * 2**30                     # 2 x 9 GiB of K/V (the largest case) plus gathers and outputs
TOLERANCE = 2.0 ** -7                         # bf16, as tests/gpu/test_paged_decode_gpu.py


def _device_room() -> int:
    info = dict(mx.device_info())
    total = int(info.get("total_memory") or info.get("memory_size") or 0)
    return total - mx.get_active_memory()


BACKEND = detect_backend()
pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.skipif(
    BACKEND == "cpu", reason="needs an MLX GPU backend (CUDA or Metal): a tensor past 2^32 elements is a GPU-kernel "
                            "limit; the CPU tests of the guard are in tests/pool/test_pool_fused_decision.py and "
                            "tests/gpu/test_kernel_plan.py")]


@pytest.fixture(autouse=True)
def room_and_kernel():
    """Skip where the device cannot hold the pool; register the backend's kernel with no thresholds (so only the
    rules under test decide) and free everything afterwards."""
    import pool.kernels as kernels
    from pool.fused_decision import register_kernel, registered_kernel, unregister_kernel

    room = _device_room()
    if room < NEEDED_BYTES:
        pytest.skip(f"needs {NEEDED_BYTES / 2**30:.0f} GiB of GPU memory for K/V tensors past 2^32 elements; "
                    f"this device has {room / 2**30:.1f} GiB free")
    before = registered_kernel(BACKEND)
    register_kernel(kernels.kernel_caps(BACKEND, {}))
    yield
    unregister_kernel(BACKEND)
    if before is not None:
        register_kernel(before)
    mx.clear_cache()


def _pool_past(design: str, slab_blocks: int):
    """(pool, keys, values, queries): sequence 1's K/V sit in rows past element 2^32 of their tensor."""
    from pool import PagedKVPool, PoolConfig

    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=BLOCK, slab_blocks=slab_blocks, design=design))
    pool.add_sequence(0)
    pool.prepare_write(0, 0, FILLER_ROWS * BLOCK)  # bookkeeping only: rows minted, storage presized (zeros)
    pool.add_sequence(1)
    pool.prepare_write(1, 0, TOKENS)
    assert pool.step_view([1]).rows[0][0] == FILLER_ROWS
    key_k, key_v, key_q = mx.random.split(mx.random.key(7), 3)
    keys = mx.random.normal((TOKENS, N_KV, HEAD_DIM), key=key_k).astype(mx.bfloat16)
    values = mx.random.normal((TOKENS, N_KV, HEAD_DIM), key=key_v).astype(mx.bfloat16)
    queries = mx.random.normal((1, N_Q, 1, HEAD_DIM), key=key_q).astype(mx.bfloat16)
    write_kv(pool, 0, 1, 0, keys, values)
    mx.eval(*pool.slabs(0))
    return pool, keys, values, queries


def _reference(keys, values, queries):
    """Attention of sequence 1 computed from the written K/V themselves (float32, no pool involved)."""
    k = keys.astype(mx.float32).transpose(1, 0, 2)[None]
    v = values.astype(mx.float32).transpose(1, 0, 2)[None]
    return mx.fast.scaled_dot_product_attention(queries.astype(mx.float32), k, v, scale=HEAD_DIM ** -0.5)


def _rel_err(out, ref) -> float:
    out32, ref32 = out.astype(mx.float32), ref.astype(mx.float32)
    return float(mx.max(mx.abs(out32 - ref32)).item() / max(mx.max(mx.abs(ref32)).item(), 1e-30))


@pytest.mark.parametrize("design, slab_blocks", [("slab", SLAB_PAST), ("monolithic", 32)])
def test_one_tensor_past_the_index_range_is_declined(design, slab_blocks):
    from pool.kernels.paged_decode import fused_decode, gather_decode
    from pool.kernels.plan import KernelUnsupported

    pool, keys, values, queries = _pool_past(design, slab_blocks)
    keys_of_layer, _ = pool.slabs(0)
    assert max(k.size for k in keys_of_layer) >= 2**32
    decision = pool.fused_decision(dtype=DTYPE, head_dim=HEAD_DIM, batch_size=1, context_len=TOKENS)
    assert not decision.use_fused and "index range" in decision.reason, decision.reason
    with pytest.raises(KernelUnsupported, match="index range"):
        fused_decode(pool, 0, [1], queries, scale=HEAD_DIM ** -0.5, backend=BACKEND)
    gathered = gather_decode(pool, 0, [1], queries, scale=HEAD_DIM ** -0.5, upcast=True)
    assert _rel_err(gathered, _reference(keys, values, queries)) < 1e-5


def test_kernel_offsets_are_64_bit_past_the_guard(monkeypatch):
    import pool.kernels.plan as plan_module
    from pool.kernels.paged_decode import fused_decode, gather_decode

    pool, keys, values, queries = _pool_past("slab", SLAB_PAST)
    monkeypatch.setattr(plan_module, "MAX_SLAB_ELEMENTS", 2**63 - 1)
    fused = fused_decode(pool, 0, [1], queries, scale=HEAD_DIM ** -0.5, backend=BACKEND)
    reference = _reference(keys, values, queries)
    assert float(mx.max(mx.abs(fused.astype(mx.float32))).item()) > 0, "read zeros: a 32-bit offset wrapped"
    assert _rel_err(fused, reference) < TOLERANCE
    assert _rel_err(fused, gather_decode(pool, 0, [1], queries, scale=HEAD_DIM ** -0.5)) < TOLERANCE


def test_many_slabs_past_2_32_in_total_run_fused():
    from pool.kernels.paged_decode import fused_decode

    pool, keys, values, queries = _pool_past("slab", 16384)
    view, (keys_of_layer, _) = pool.step_view([1]), pool.slabs(0)
    assert view.num_slabs == 9 and sum(k.size for k in keys_of_layer) > 2**32 > keys_of_layer[0].size
    decision = pool.fused_decision(dtype=DTYPE, head_dim=HEAD_DIM, batch_size=1, context_len=TOKENS)
    assert decision.use_fused, decision.reason
    fused = fused_decode(pool, 0, [1], queries, scale=HEAD_DIM ** -0.5, backend=BACKEND)
    assert _rel_err(fused, _reference(keys, values, queries)) < TOLERANCE
