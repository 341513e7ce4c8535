"""Paged prefill attention from MLX operations: a chunk's queries against its sequence's history read in place from
the slabs, plus the chunk's own K/V under the causal mask, merged with a log-sum-exp (online-softmax) merge.

Inputs: ``queries`` [1, Hq, L, D] (the chunk's, RoPE applied), ``keys``/``values`` [1, Hkv, L, D] (the chunk's own
K/V, as the model produced them) and the history per piece of consecutive rows of one slab
(``pool/prefill_pieces.py``), as views (:func:`piece_views`): slices of a slab tensor ``[rows, Hkv, block, D]``,
each ``[n, Hkv, t, D]``. The storage is head-major (``pool/storage_base.py``), so every (row, head) of a view is a
packed ``[t, D]`` matrix and MLX's matmul reads it in place: no history byte is copied (the gather meter measures
0). A piece whose first or last block is only partly history is cut at the token axis into up to three views
(partial first row, whole rows, partial last row), still views.

Per view i, with ``q = queries * scale`` grouped as [Hkv, G*L, D] (G = Hq / Hkv: grouped-query heads share their
KV head without repeating it) and broadcast over the view's rows: ``s_i = q @ K_i^T`` ([n, Hkv, G*L, t], float32),
``m_i = max(s_i)`` over rows and tokens, ``p_i = exp(s_i - m_i)``, ``l_i = sum(p_i)``, ``o_i = sum over rows of
p_i @ V_i`` (each row's product in the dtype, summed in float32); the chunk's own part is the same with ``s``
masked causally inside the chunk. Merge: ``M = max_i m_i``, ``out = sum_i exp(m_i - M) o_i / sum_i exp(m_i - M)
l_i``.

Cost per view: ~11 MLX operations (2 slices, 2 matmuls, max, exp, sums, casts) and float32 tiles of Hq x L x t
(scores) and n x Hq x L x D (per-row outputs, summed); the chunk's own part adds ~13 and the merge ~10 whatever
the view count. A chunk with no history (the first) is one call of MLX's own ``scaled_dot_product_attention`` on
its K/V with the causal mask: nothing is read from the slabs.
"""

from __future__ import annotations

import mlx.core as mx

from pool.prefill_pieces import Piece


def piece_views(key_slabs: list, value_slabs: list, pieces: list[Piece], block_size: int) -> list[tuple]:
    """(K, V) views ``[n, Hkv, t, D]`` of every piece's history tokens, in token order (slab slices: no copy).
    A piece is one to three views: its partial first row, its whole rows, its partial last row."""
    return [(key_slabs[piece.slab][rows, :, tokens], value_slabs[piece.slab][rows, :, tokens])
            for piece in pieces for rows, tokens in _piece_slices(piece, block_size)]


def _piece_slices(piece: Piece, block_size: int) -> list[tuple[slice, slice]]:
    """(rows in the slab, tokens in those rows) of each view of ``piece``: tokens ``[lo, hi)`` of its flattened
    rows split where a row is only partly inside."""
    first, last = piece.lo // block_size, (piece.hi - 1) // block_size  # piece rows holding the first/last token
    begin, end = piece.lo % block_size, (piece.hi - 1) % block_size + 1  # token bounds in those rows
    base = piece.first_row
    if first == last:
        return [(slice(base + first, base + first + 1), slice(begin, end))]
    slices = []
    if begin:
        slices.append((slice(base + first, base + first + 1), slice(begin, block_size)))
        first += 1
    whole_end = last + 1 if end == block_size else last
    if whole_end > first:
        slices.append((slice(base + first, base + whole_end), slice(0, block_size)))
    if end != block_size:
        slices.append((slice(base + last, base + last + 1), slice(0, end)))
    return slices


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
        scores = (q @ k.swapaxes(-1, -2)).astype(mx.float32)  # [n, Hkv, G*L, t]: q broadcast over the rows
        _softmax_part(scores, v, dtype, maxes, sums, outs)
    own = (q @ keys[0].swapaxes(-1, -2)).astype(mx.float32).reshape(kv_heads, groups, length, length)
    mask = causal_mask(length) if mask is None else mask
    own = mx.where(mask, own, mx.array(-mx.inf, dtype=mx.float32)).reshape(1, kv_heads, groups * length, length)
    _softmax_part(own, values, dtype, maxes, sums, outs)
    stacked_max = mx.stack(maxes)  # [P, Hkv, G*L, 1]
    weights = mx.exp(stacked_max - stacked_max.max(axis=0))
    total = (weights * mx.stack(sums)).sum(axis=0)
    out = (weights * mx.stack(outs)).sum(axis=0) / total  # [Hkv, G*L, D]
    return out.astype(dtype).reshape(1, q_heads, length, dim)


def _softmax_part(scores: mx.array, values: mx.array, dtype, maxes: list, sums: list, outs: list) -> None:
    """One part's running max, exp-sum and unnormalised output over its rows (axis 0) and tokens (last axis),
    appended to the lists (float32, [Hkv, G*L, 1] and [Hkv, G*L, D]). ``scores`` [n, Hkv, G*L, t], ``values``
    [n, Hkv, t, D]."""
    top = scores.max(axis=(0, 3), keepdims=True)
    weights = mx.exp(scores - top)
    maxes.append(top[0])
    sums.append(weights.sum(axis=(0, 3), keepdims=True)[0])
    outs.append((weights.astype(dtype) @ values).astype(mx.float32).sum(axis=0))
