"""The CPU emulation of the fused paged-decode kernel (``pool.kernels.paged_decode_emulated``), which the fused-route
tests run as the kernel: it computes softmax(q k^T * scale) v of the K/V its block tables name, in the kernel's
blocking (splits, warps, token lanes, tiles) and float32 order.

Against the float32 gather + SDPA path: within ``reorder_tolerance`` (two orders of float32 roundings), for single,
multi-slab and fragmented tables, one and several splits, monolithic storage, GQA groups 1-8, head_dim 8-128,
block sizes whose warp step is longer than a block, and a logical start. Reading by row is pinned twice: every
position no sequence can see is NaN (a stray read shows), and changing one visible token of one sequence in its
slab changes that sequence's output only.
"""

import pytest

from pool_writes import write_kv

from .helpers import assert_within_reorder_tolerance

pytestmark = pytest.mark.numerics

CASES = {  # name: (lengths, layout, n_q, n_kv, head_dim, block_size, slab_blocks, num_splits, design)
    "tiny-model geometry": ([9, 40, 23], "fragmented", 4, 2, 16, 4, 2, None, "slab"),
    "multi-slab, one split": ([100, 300, 64, 257], "multi", 4, 2, 64, 16, 4, 1, "slab"),
    "fragmented, three splits": ([100, 300, 64, 257], "fragmented", 4, 2, 64, 16, 4, 3, "slab"),
    "single slab, default splits": ([33, 290], "single", 8, 8, 32, 8, 4, None, "slab"),
    "GQA 8, head_dim 128": ([70, 33], "fragmented", 16, 2, 128, 8, 4, 2, "slab"),
    "head_dim 8, one lane": ([5, 17, 1], "multi", 2, 1, 8, 4, 2, None, "slab"),
    "monolithic": ([50, 7, 81], "multi", 4, 2, 32, 8, 2, 2, "monolithic"),
}


def _filled(lengths, layout, n_kv, head_dim, block_size, slab_blocks, design, dtype="float32"):
    from pool.kernels.workbench import fill_pool

    return fill_pool(lengths, n_kv_heads=n_kv, head_dim=head_dim, dtype=dtype, layout=layout, block_size=block_size,
                     slab_blocks=slab_blocks, seed=sum(lengths), design=design)


def _emulated(pool, ids, queries, scale, num_splits=None):
    from pool.kernels.paged_decode import plan_for_pool
    from pool.kernels.paged_decode_emulated import paged_decode_emulated

    plan = plan_for_pool(pool, ids, scale=scale, num_splits=num_splits)
    return paged_decode_emulated(queries, pool.storage.keys[0], pool.storage.values[0], plan), plan


@pytest.mark.parametrize("case", list(CASES))
def test_emulation_matches_the_gather_path_within_float32_tolerance(case):
    import mlx.core as mx

    from pool.kernels.paged_decode import gather_decode
    from pool.kernels.workbench import random_queries

    lengths, layout, n_q, n_kv, head_dim, block_size, slab_blocks, num_splits, design = CASES[case]
    pool, ids = _filled(lengths, layout, n_kv, head_dim, block_size, slab_blocks, design)
    queries = random_queries(len(lengths), n_q, head_dim, "float32")
    out, plan = _emulated(pool, ids, queries, head_dim ** -0.5, num_splits)
    ref = gather_decode(pool, 0, ids, queries, scale=head_dim ** -0.5)
    assert out.shape == queries.shape and out.dtype == mx.float32
    assert_within_reorder_tolerance(out, ref, case)
    assert not mx.array_equal(out, ref)  # its own arithmetic, not SDPA's
    if num_splits:
        assert plan.num_splits == num_splits
    if layout != "single" and design == "slab":
        assert plan.num_slabs > 1


def test_half_precision_inputs_round_the_output_once():
    """float16 slabs and queries: float32 inside, the output rounded to float16 (the kernel's ``ssp_store``)."""
    import mlx.core as mx

    from pool.kernels.paged_decode import gather_decode
    from pool.kernels.workbench import random_queries

    pool, ids = _filled([100, 31, 257], "fragmented", 2, 64, 16, 4, "slab", dtype="float16")
    queries = random_queries(3, 8, 64, "float16")
    out, _ = _emulated(pool, ids, queries, 0.125, num_splits=2)
    ref32 = gather_decode(pool, 0, ids, queries, scale=0.125, upcast=True)
    assert out.dtype == mx.float16
    assert_within_reorder_tolerance(out, ref32.astype(mx.float16), "float16 vs float32 gather")


def test_invisible_positions_are_never_read():
    """NaN in every position no sequence can see (free rows, partial-block tails, positions before a logical
    start): the output stays finite and equal to the gather path's within tolerance."""
    import mlx.core as mx

    from pool.kernels.paged_decode import gather_decode
    from pool.kernels.workbench import poison_unused, random_queries

    pool, ids = _filled([45, 3, 70], "fragmented", 2, 16, 4, 2, "slab")
    pool.add_sequence(99)
    pool.prepare_write(99, 0, 13)
    write_kv(pool, 0, 99, 0, mx.zeros((13, 2, 16)), mx.zeros((13, 2, 16)))
    pool.release(99)  # its rows are free now: poisoned below
    assert poison_unused(pool) >= 13 + (48 - 45) + (4 - 3) + (72 - 70)
    queries = random_queries(3, 4, 16, "float32")
    out, _ = _emulated(pool, ids, queries, 0.25, num_splits=2)
    assert not mx.any(mx.isnan(out)).item()
    assert_within_reorder_tolerance(out, gather_decode(pool, 0, ids, queries, scale=0.25), "poisoned pool")


def test_one_changed_token_changes_only_its_sequence():
    """Each sequence's output reads its own rows: the last visible token of sequence 1, changed in its slab row,
    moves sequence 1's output and leaves the others' bytes as they were."""
    import mlx.core as mx

    from pool.kernels.workbench import random_queries

    pool, ids = _filled([21, 30, 17], "fragmented", 2, 16, 4, 2, "slab")
    queries = random_queries(3, 4, 16, "float32")
    before, _ = _emulated(pool, ids, queries, 0.25)
    table = pool.book.table(1)
    row = table.rows[(table.length - 1) // 4]
    slab, local = divmod(row, 2)
    keys = pool.storage.keys[0]
    keys[slab] = mx.array(keys[slab])
    keys[slab][local, (table.length - 1) % 4] = keys[slab][local, (table.length - 1) % 4] + 3.0
    after, _ = _emulated(pool, ids, queries, 0.25)
    assert mx.array_equal(after[0], before[0]) and mx.array_equal(after[2], before[2])
    assert mx.abs(after[1] - before[1]).max().item() > 1e-3


def test_a_logical_start_hides_the_tokens_before_it():
    """Sequence i attends to [start_i, end_i): equal to SDPA over those tokens only."""
    import mlx.core as mx

    from pool.kernels.paged_decode_emulated import paged_decode_emulated
    from pool.kernels.plan import plan_decode
    from pool.kernels.workbench import random_queries

    pool, ids = _filled([90, 61], "multi", 2, 32, 8, 2, "slab")
    queries = random_queries(2, 4, 32, "float32")
    starts = [37, 8]
    tables = [pool.book.table(s).rows for s in ids]
    plan = plan_decode(tables, [90, 61], starts, block_size=8, slab_blocks=2, num_slabs=len(pool.storage.keys[0]),
                       n_kv_heads=2, scale=32 ** -0.5, num_splits=2)
    out = paged_decode_emulated(queries, pool.storage.keys[0], pool.storage.values[0], plan)
    refs = []
    for i, seq_id in enumerate(ids):
        visible = pool.gather_visible(0, seq_id)
        k, v = visible.keys[:, starts[i]:], visible.values[:, starts[i]:]
        refs.append(mx.fast.scaled_dot_product_attention(queries[i:i + 1], k[None], v[None], scale=32 ** -0.5))
    assert_within_reorder_tolerance(out, mx.concatenate(refs), "logical start")


def test_shapes_the_plan_does_not_describe_are_refused():
    import mlx.core as mx

    from pool.kernels.paged_decode import plan_for_pool
    from pool.kernels.paged_decode_emulated import paged_decode_emulated
    from pool.kernels.plan import KernelUnsupported

    pool, ids = _filled([9, 12], "multi", 2, 16, 4, 2, "slab")
    plan = plan_for_pool(pool, ids, scale=0.25)
    keys, values = pool.storage.keys[0], pool.storage.values[0]
    with pytest.raises(KernelUnsupported, match="do not fit"):
        paged_decode_emulated(mx.zeros((3, 4, 1, 16)), keys, values, plan)  # three queries, two sequences
    with pytest.raises(KernelUnsupported, match="another slab geometry"):
        paged_decode_emulated(mx.zeros((2, 4, 1, 16)), keys[:-1], values[:-1], plan)
    with pytest.raises(KernelUnsupported, match="share one dtype"):
        paged_decode_emulated(mx.zeros((2, 4, 1, 16), dtype=mx.float16), keys, values, plan)
