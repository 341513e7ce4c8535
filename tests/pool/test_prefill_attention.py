"""The paged prefill route's attention (pool/prefill_attention.py) on a real pool with a fragmented table: history
pieces read in place from the right slab at the right offset, the chunk's own K/V under the causal mask, merged by
log-sum-exp, against MLX's SDPA over the gathered history (float32 exactly to rounding; bf16/fp16 to a stated
tolerance). Plus the plain-Python pieces and decision rule."""

from __future__ import annotations

import mlx.core as mx
import pytest

from pool import PagedKVPool, PoolConfig
from pool.prefill_attention import paged_prefill_attention, piece_views
from pool.prefill_decision import ENV_VAR, MAX_PIECES, REASON_FIRST_CHUNK, REASON_OPT_IN, decide_prefill
from pool.prefill_pieces import Piece, history_pieces

from pool_helpers import make_kv
from pool_writes import write_layers

BLOCK = 4
HEADS, Q_HEADS, DIM = 2, 6, 8
# largest |paged - reference| over unit-normal data, per dtype (reference: float32 SDPA over the gathered K/V);
# measured worst cases over seeds 0-4 (default and Prescott OpenBLAS kernels alike): fp32 2.4e-7, bf16 8.4e-3,
# fp16 7.2e-4 (scores and probabilities rounded to the dtype around the float32 softmax, as mlx-lm's own unfused
# attention does); the tolerances leave ~2.5x headroom
TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 2e-3}


def fragmented_pool(dtype: str = "float32", history: int = 21):
    """A pool whose sequence 2 holds ``history`` tokens in rows out of order across slabs (sequence 0's freed rows
    first, then new ones), K/V random; returns (pool, seq id)."""
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=BLOCK, slab_blocks=2))
    for seq, tokens in ((0, 7), (1, 13)):
        pool.add_sequence(seq)
        write_layers(pool, seq, 0, *make_kv(tokens, HEADS, DIM, dtype, seed=seq))
    pool.release(0)
    pool.add_sequence(2)
    write_layers(pool, 2, 0, *make_kv(history, HEADS, DIM, dtype, seed=7))
    return pool, 2


def chunk_case(dtype: str, seed: int, history: int = 21, length: int = 6):
    """Write a ``length``-token chunk after the history; return (queries, chunk K/V as the model hands them,
    the pool's pieces and views, reference output)."""
    pool, seq = fragmented_pool(dtype, history)
    keys, values = make_kv(length, HEADS, DIM, dtype, seed=100 + seed)
    write_layers(pool, seq, history, keys, values)
    queries = mx.random.normal((1, Q_HEADS, length, DIM), key=mx.random.key(seed)).astype(keys.dtype)
    view = pool.step_view([seq])
    pieces = history_pieces(view.rows[0], view.logical_starts[0], history, BLOCK, view.rows_per_slab)
    history_views = piece_views(*pool.slabs(0), pieces, BLOCK)
    chunk_k, chunk_v = keys.transpose(1, 0, 2)[None], values.transpose(1, 0, 2)[None]
    gathered = pool.gather_visible(0, seq, "prefill")
    visible = mx.arange(history + length)[None, :] <= (mx.arange(length)[:, None] + history)
    f32 = lambda a: a.astype(mx.float32)  # noqa: E731
    reference = mx.fast.scaled_dot_product_attention(
        f32(queries), f32(mx.repeat(gathered.keys[None], Q_HEADS // HEADS, axis=1)),
        f32(mx.repeat(gathered.values[None], Q_HEADS // HEADS, axis=1)), scale=DIM ** -0.5, mask=visible)
    return queries, chunk_k, chunk_v, pieces, history_views, reference


def test_fragmented_history_lies_in_several_pieces_across_slabs():
    pool, seq = fragmented_pool()
    view = pool.step_view([seq])
    pieces = history_pieces(view.rows[0], 0, 21, BLOCK, view.rows_per_slab)
    assert len({p.slab for p in pieces}) > 1 and len(pieces) > 2, pieces
    assert sum(p.tokens for p in pieces) == 21
    # the rows each piece names are the table's rows in order
    rows = [p.slab * view.rows_per_slab + p.first_row + i for p in pieces for i in range(p.num_rows)]
    assert rows == list(view.rows[0][:len(rows)])


@pytest.mark.numerics
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("seed", range(3))
def test_paged_prefill_matches_sdpa_over_the_gathered_history(dtype, seed):
    queries, chunk_k, chunk_v, pieces, views, reference = chunk_case(dtype, seed)
    out = paged_prefill_attention(queries, chunk_k, chunk_v, views, scale=DIM ** -0.5)
    assert out.shape == queries.shape and out.dtype == queries.dtype
    error = mx.abs(out.astype(mx.float32) - reference).max().item()
    assert error <= TOLERANCE[dtype], f"{dtype}: max |paged - reference| {error} above {TOLERANCE[dtype]}"


@pytest.mark.numerics
def test_history_starting_mid_block_and_a_one_token_chunk():
    for history, length in ((21, 1), (5, 3), (8, 4)):
        queries, chunk_k, chunk_v, _, views, reference = chunk_case("float32", 1, history, length)
        out = paged_prefill_attention(queries, chunk_k, chunk_v, views, scale=DIM ** -0.5)
        assert mx.abs(out - reference).max().item() <= TOLERANCE["float32"], (history, length)


@pytest.mark.numerics
def test_first_chunk_attends_its_own_keys_only():
    queries, chunk_k, chunk_v, *_ = chunk_case("float32", 0)
    out = paged_prefill_attention(queries, chunk_k, chunk_v, [], scale=DIM ** -0.5)
    expected = mx.fast.scaled_dot_product_attention(queries, chunk_k, chunk_v, scale=DIM ** -0.5, mask="causal")
    assert mx.array_equal(out, expected)


def test_history_views_are_views_of_the_slabs_not_copies():
    from pool.copy_meter import allocated_during

    pool, seq = fragmented_pool()
    view = pool.step_view([seq])
    pieces = history_pieces(view.rows[0], 0, 20, BLOCK, view.rows_per_slab)  # whole blocks: no trimming
    slabs = pool.slabs(0)
    flat, allocated = allocated_during(lambda: [t for pair in piece_views(*slabs, pieces, BLOCK) for t in pair],
                                       slabs[0] + slabs[1])
    assert allocated == 0, f"reading the history in place allocated {allocated} bytes"
    assert len(flat) == 2 * len(pieces)


def test_the_matmuls_read_the_history_in_place():
    """Head-major rows: every (row, head) of a view is a packed matrix, so MLX's matmul allocates its result and
    nothing else (a token-major layout made it copy the piece, unseen)."""
    from pool.copy_meter import allocated_during

    pool, seq = fragmented_pool()
    view = pool.step_view([seq])
    pieces = history_pieces(view.rows[0], 1, 20, BLOCK, view.rows_per_slab)  # a partial first row, then whole ones
    slabs = pool.slabs(0)
    q = mx.random.normal((HEADS, 3, DIM))
    mx.eval(q)
    for k_view, v_view in piece_views(*slabs, pieces, BLOCK):
        (scores,), allocated = allocated_during(lambda: [q @ k_view.swapaxes(-1, -2)], [*slabs[0], q])
        assert allocated == scores.nbytes, f"the score matmul copied {allocated - scores.nbytes} bytes"
        weights = mx.softmax(scores, axis=-1)
        mx.eval(weights)
        (out,), allocated = allocated_during(lambda: [weights @ v_view], [*slabs[1], weights])
        assert allocated == out.nbytes, f"the value matmul copied {allocated - out.nbytes} bytes"


def test_views_cut_partial_rows_and_hold_the_history_tokens_in_order():
    """Each view's tokens, read back in order, are exactly the gathered history (partial first and last rows)."""
    pool, seq = fragmented_pool()
    view = pool.step_view([seq])
    for lo, hi in ((0, 21), (1, 20), (5, 7), (3, 4), (4, 8)):
        pieces = history_pieces(view.rows[0], lo, hi, BLOCK, view.rows_per_slab)
        views = piece_views(*pool.slabs(0), pieces, BLOCK)
        keys = mx.concatenate([k.transpose(1, 0, 2, 3).reshape(HEADS, -1, DIM) for k, _ in views], axis=1)
        pool.set_logical_start(seq, lo) if lo else None
        expected = pool.storage.gather(0, list(view.rows[0][:-(-hi // BLOCK)]), lo, hi)[0]
        assert mx.array_equal(keys, expected), (lo, hi)


def test_pieces_merge_consecutive_rows_of_one_slab_and_trim_the_ends():
    # rows 0,1 (slab 0), 2,3 (slab 1), 5 (slab 2, row 1), 4 (slab 2, row 0: out of order)
    pieces = history_pieces([0, 1, 2, 3, 5, 4], 2, 22, 4, 2)
    assert pieces == [Piece(0, 0, 2, 2, 8), Piece(1, 0, 2, 0, 8), Piece(2, 1, 1, 0, 4), Piece(2, 0, 1, 0, 2)]
    assert history_pieces([0, 1], 3, 3, 4, 2) == []
    assert history_pieces([7], 0, 3, 4, 100) == [Piece(0, 7, 1, 0, 3)]  # monolithic: one tensor of 100 rows


def test_prefill_decision_reasons_in_order():
    on = {ENV_VAR: "1"}
    assert decide_prefill(pieces=3, batch_size=1, routable=True, environ={ENV_VAR: "0"}).reason.startswith("disabled")
    assert not decide_prefill(pieces=3, batch_size=1, routable=False, environ=on).use_fused
    assert not decide_prefill(pieces=3, batch_size=2, routable=True, environ=on).use_fused
    assert not decide_prefill(pieces=MAX_PIECES + 1, batch_size=1, routable=True, environ=on).use_fused
    assert decide_prefill(pieces=MAX_PIECES, batch_size=1, routable=True, environ=on).use_fused
    for environ in ({}, on):  # a first chunk reads nothing from the slabs: no gather, whatever the opt-in
        first = decide_prefill(pieces=0, batch_size=1, routable=True, environ=environ)
        assert first.use_fused and first.reason == REASON_FIRST_CHUNK
    # a history is gathered unless the paged route is asked for (measured slower on the H200: docs/prefill.md)
    default = decide_prefill(pieces=3, batch_size=1, routable=True, environ={})
    assert not default.use_fused and default.reason == REASON_OPT_IN
