"""Paged prefill attention from MLX operations: a chunk's queries against its sequence's history read in place from
the slabs, plus the chunk's own K/V under the causal mask, merged with a log-sum-exp (online-softmax) merge.

Inputs: ``queries`` [1, Hq, L, D] (the chunk's, RoPE applied), ``keys``/``values`` [1, Hkv, L, D] (the chunk's own
K/V, as the model produced them) and the history per piece of consecutive rows of one slab
(``pool/prefill_pieces.py``): ``piece_views`` are a slice, a reshape and a transpose of a slab tensor (no copy),
and ``matmul_ready`` turns them into what MLX's matmul can read: with more than one KV head that is a copy of the
piece (MLX's matmul needs packed rows; the pool interleaves heads per token), so the route copies each piece once
per chunk, transiently, instead of joining the whole history into one tensor (and trimming it: a second copy) as
the gather route does. Reading the slabs without any copy needs packed per-head rows: a head-major slab layout
([rows, Hkv, block, D], one batched matmul over heads and rows) or a kernel (docs/prefill.md).

Per piece i, with ``q = queries * scale`` grouped as [Hkv, G*L, D] (G = Hq / Hkv: grouped-query heads share their
KV head without repeating it): ``s_i = q @ K_i^T`` (float32), ``m_i = max(s_i)``, ``p_i = exp(s_i - m_i)``,
``l_i = sum(p_i)``, ``o_i = p_i @ V_i``; the chunk's own part is the same with ``s`` masked causally inside the
chunk. Merge: ``M = max_i m_i``, ``out = sum_i exp(m_i - M) o_i / sum_i exp(m_i - M) l_i``.

Cost per piece: 11 MLX operations (3 to view K, 3 to view V, 2 matmuls, max, exp, sum; the subtraction and the
float32 casts fold into the same count) and a float32 score tile of Hq x L x T_i; the chunk's own part adds ~13 and
the merge ~10 whatever the piece count. A chunk with no history (the first) is one call of MLX's own
``scaled_dot_product_attention`` on its K/V with the causal mask: nothing is read from the slabs.
"""

from __future__ import annotations

import mlx.core as mx

from pool.prefill_pieces import Piece


def piece_views(key_slabs: list, value_slabs: list, pieces: list[Piece], block_size: int) -> list[tuple]:
    """(K, V) views ``[Hkv, T, D]`` of every piece (slab slices: no copy). Not yet what a matmul reads in place:
    see :func:`matmul_ready`."""
    views = []
    for piece in pieces:
        pair = []
        for slabs in (key_slabs, value_slabs):
            rows = slabs[piece.slab][piece.first_row:piece.first_row + piece.num_rows]
            _, _, heads, dim = rows.shape
            flat = rows.reshape(piece.num_rows * block_size, heads, dim)
            if (piece.lo, piece.hi) != (0, piece.num_rows * block_size):
                flat = flat[piece.lo:piece.hi]
            pair.append(flat.transpose(1, 0, 2))
        views.append(tuple(pair))
    return views


def matmul_ready(view: mx.array) -> mx.array:
    """``view`` as MLX's matmul reads it. MLX's matmul (CPU and CUDA: ``check_transpose`` in both backends) takes
    a matrix in place only when its rows are packed (row stride == row length); the pool stores a token's heads
    side by side ([rows, block, Hkv, D]), so one head's [T, D] rows are Hkv x D apart and the matmul would copy
    the piece itself, unseen. Copying it here makes that copy explicit, so the gather meter measures it. With
    one KV head the rows are packed: the view is returned as it is (no copy)."""
    return view if view.shape[0] == 1 else mx.contiguous(view)


def causal_mask(length: int) -> mx.array:
    """[L, L] bool: query i sees chunk keys j <= i."""
    index = mx.arange(length)
    return index[:, None] >= index[None, :]


def paged_prefill_attention(queries: mx.array, keys: mx.array, values: mx.array, history: list[tuple], *,
                            scale: float, mask: mx.array | None = None) -> mx.array:
    """Attention of the chunk's ``queries`` over ``history`` (piece views, token order) and its own ``keys``/
    ``values`` (causal); returns [1, Hq, L, D] in the queries' dtype. ``mask``: ``causal_mask(L)`` if the caller
    keeps one per step. Reads only."""
    if not history:
        return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask="causal")
    _, q_heads, length, dim = queries.shape
    kv_heads = keys.shape[1]
    groups = q_heads // kv_heads
    dtype = queries.dtype
    q = (queries * scale).reshape(kv_heads, groups * length, dim)
    maxes, sums, outs = [], [], []
    for k, v in history:
        scores = (q @ k.swapaxes(-1, -2)).astype(mx.float32)  # [Hkv, G*L, T_i]
        _softmax_part(scores, v, dtype, maxes, sums, outs)
    own = (q @ keys[0].swapaxes(-1, -2)).astype(mx.float32).reshape(kv_heads, groups, length, length)
    mask = causal_mask(length) if mask is None else mask
    own = mx.where(mask, own, mx.array(-mx.inf, dtype=mx.float32)).reshape(kv_heads, groups * length, length)
    _softmax_part(own, values[0], dtype, maxes, sums, outs)
    stacked_max = mx.stack(maxes)  # [P, Hkv, G*L, 1]
    weights = mx.exp(stacked_max - stacked_max.max(axis=0))
    total = (weights * mx.stack(sums)).sum(axis=0)
    out = (weights * mx.stack(outs)).sum(axis=0) / total  # [Hkv, G*L, D]
    return out.astype(dtype).reshape(1, q_heads, length, dim)


def _softmax_part(scores: mx.array, values: mx.array, dtype, maxes: list, sums: list, outs: list) -> None:
    """One part's running max, exp-sum and unnormalised output, appended to the lists (float32)."""
    top = scores.max(axis=-1, keepdims=True)
    weights = mx.exp(scores - top)
    maxes.append(top)
    sums.append(weights.sum(axis=-1, keepdims=True))
    outs.append((weights.astype(dtype) @ values).astype(mx.float32))
