"""NumPy emulation of the CUDA paged-decode kernels' algorithm, for checking it on a machine without a GPU.

It reads ``plan.meta`` exactly as the kernel does (header, per-sequence bounds, block table; row -> slab and row
in slab; split chunks; warps taking whole blocks round-robin; UNROLL-token tiles with one max/correction each;
warp-lane, warp and split merges in the log2 domain). It does not emulate lanes or rounding of the output: it
checks the indexing and the softmax algebra, which is where a kernel is most often wrong.
"""

from __future__ import annotations

import numpy as np

from pool.kernels.plan import META_HEADER, DecodePlan

NEG_BIG = -1.0e30
LOG2E = 1.4426950408889634
NUM_WARPS = 4


def _merge(states):
    """Merge (m, l, acc) online-softmax states (log2 domain)."""
    m_all = max([NEG_BIG] + [m for m, _, _ in states])
    l_all = sum(l * 2.0 ** (m - m_all) for m, l, _ in states)
    acc_all = sum(acc * 2.0 ** (m - m_all) for m, _, acc in states)
    return m_all, l_all, acc_all


def _warp_state(q_g, k_rows, v_rows, positions, c0, c1, step):
    """One warp's online softmax over its tokens, tile by tile (tiles of ``step`` tokens of one block)."""
    m, l, acc = NEG_BIG, 0.0, np.zeros(q_g.shape[-1])
    for tile_start in range(0, len(positions), step):
        sl = slice(tile_start, tile_start + step)
        pos = positions[sl]
        valid = (pos >= c0) & (pos < c1)
        scores = np.where(valid, k_rows[sl] @ q_g, -np.inf)
        m_new = max(m, scores.max())
        corr = 2.0 ** (m - m_new)
        p = 2.0 ** (scores - m_new)
        l = l * corr + p.sum()
        acc = acc * corr + (p[:, None] * np.where(valid[:, None], v_rows[sl], 0.0)).sum(axis=0)
        m = m_new
    return m, l, acc


def emulate(queries, k_slabs, v_slabs, plan: DecodePlan, step: int = 8):
    """queries [B, Hq, D]; slabs [slab_blocks, Hkv, block_size, D] (head-major rows, float64 numpy). Returns
    [B, Hq, D]."""
    meta = plan.meta
    slab_blocks, stride, chunk = int(meta[0]), int(meta[1]), int(meta[2])
    scale = float(meta[3:4].view(np.float32)[0])
    batch, n_q, head_dim = queries.shape
    n_kv, block_size = k_slabs[0].shape[1], k_slabs[0].shape[2]
    group = n_q // n_kv
    bounds = meta[META_HEADER:META_HEADER + 2 * batch].reshape(batch, 2)
    tables = meta[META_HEADER + 2 * batch:].reshape(batch, stride)
    out = np.zeros_like(queries)
    for b in range(batch):
        start, end = int(bounds[b, 0]), int(bounds[b, 1])
        for kvh in range(n_kv):
            for g in range(group):
                h = kvh * group + g
                q_g = queries[b, h] * scale * LOG2E
                split_states = []
                for split in range(plan.num_splits):
                    c0, c1 = max(start, split * chunk), min(end, (split + 1) * chunk)
                    warp_states = [[] for _ in range(NUM_WARPS)]
                    if c0 < c1:
                        blocks = range(c0 // block_size, (c1 - 1) // block_size + 1)
                        for i, blk in enumerate(blocks):
                            row = int(tables[b, blk])
                            slab, local = divmod(row, slab_blocks)
                            k_rows = k_slabs[slab][local, kvh]
                            v_rows = v_slabs[slab][local, kvh]
                            positions = blk * block_size + np.arange(block_size)
                            warp_states[i % NUM_WARPS].append(
                                _warp_state(q_g, k_rows, v_rows, positions, c0, c1, step))
                    per_warp = [_merge(states) for states in warp_states]
                    split_states.append(_merge(per_warp))
                m, l, acc = _merge(split_states)
                out[b, h] = acc / l if l > 0 else 0.0
    return out
