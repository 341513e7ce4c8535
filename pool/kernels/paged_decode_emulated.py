"""CPU emulation of the fused paged-decode kernel: what ``paged_decode_cuda.py`` computes (``paged_decode_metal.py``
runs the same algorithm), in NumPy float32, operation for operation, so that the fused route can be tested on a
machine without a GPU against the gather route it replaces. Same contract as the kernels:
``paged_decode_emulated(queries, k_slabs, v_slabs, plan, *, meta=None)``.

Emulated, following the kernels' PASS1_SOURCE / MERGE_SOURCE:
* the launch's ``meta`` read as the kernel reads it (header, per-sequence [start, end), block table); a physical
  row r read from slab r // slab_blocks at row r % slab_blocks of that slab tensor;
* the grid: one block per (split, KV head, sequence); 4 warps taking the split's pool blocks round-robin; a token's
  head row spread over head_dim / 8 lanes of 8 elements, 32 / lanes tokens per warp step, ``unroll_for`` steps
  per tile;
* float32 arithmetic in the kernel's order: queries pre-scaled by scale * log2(e); per lane an fma chain over its 8
  elements, then the xor-butterfly sum over the lanes; per tile one max and one correction (exp2), each weight
  added to l and fma'd into acc token by token; token lanes merged by the xor butterfly, warps in warp order,
  splits by the merge pass in split order; out = acc / l (0 where l is 0), rounded to the queries' dtype.

Not emulated: the GPU's exp2f (its last bit may differ from NumPy's exp2) and the compiler's contraction of
``a * b + c`` into fma outside the kernel's explicit fma calls; an fma here is the exact float64 product plus the
addend, rounded to float32 (a double rounding where the kernel rounds once). So it reproduces the kernel's
algorithm and order of roundings, not every last bit. Any head_dim that is 8 x a divisor of 32 and any block size
run: where a warp step is longer than a block (a geometry the GPU kernels refuse), the lanes past the block's end
hold no token and are masked like invalid positions. Reads its inputs; mutates nothing. Imports mlx inside
functions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from pool.kernels.plan import META_HEADER, DecodePlan, KernelUnsupported

VEC = 8                                   # elements per lane (one 16-byte load of half precision)
NUM_WARPS = 4
NEG_BIG = np.float32(-1.0e30)             # SSP_NEG_BIG: the running max's start (finite: exp2 of a difference)
NEG_INF = np.float32(-np.inf)
LOG2E = np.float32(1.4426950408889634)    # SSP_LOG2E, a float literal in the kernels
F32 = np.float32


@dataclass(frozen=True)
class _Launch:
    """The launch as the kernel sees it: geometry, meta fields, the slabs stacked [slab, row, token, kv, dim]."""

    batch: int
    splits: int
    n_kv: int
    group: int
    head_dim: int
    block_size: int
    slab_blocks: int
    unroll: int
    qscale: np.float32      # the softmax scale (meta[3]'s bits) times log2(e), as the kernel forms it
    c0: np.ndarray          # [B, S] first position of (sequence, split)
    c1: np.ndarray          # [B, S] end position
    table: np.ndarray       # [B, table_stride] physical rows
    keys: np.ndarray
    values: np.ndarray

    @property
    def lanes(self) -> int:
        return self.head_dim // VEC

    @property
    def tokens_per_step(self) -> int:  # TPW
        return 32 // self.lanes


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c with the product exact (float64) and one rounding of the sum to float32."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)


def _to_numpy(array) -> np.ndarray:
    import mlx.core as mx

    return np.array(array if array.dtype == mx.float32 else array.astype(mx.float32), dtype=F32)


def _check(queries, k_slabs: Sequence, v_slabs: Sequence, plan: DecodePlan) -> tuple[int, int, int, int]:
    """(n_q, n_kv, head_dim, block_size); KernelUnsupported on shapes the kernel's lane layout cannot take."""
    if len(k_slabs) != len(v_slabs) or not k_slabs:
        raise KernelUnsupported(f"need as many V slabs as K slabs (>= 1), got {len(k_slabs)}/{len(v_slabs)}")
    shape = tuple(k_slabs[0].shape)
    if len(shape) != 4 or any(tuple(s.shape) != shape for s in (*k_slabs, *v_slabs)):
        raise KernelUnsupported("slabs must share one [slab_blocks, n_kv_heads, block_size, head_dim] shape")
    if any(s.dtype != queries.dtype for s in (*k_slabs, *v_slabs)):
        raise KernelUnsupported("slabs and queries must share one dtype")
    slab_blocks, n_kv, block_size, head_dim = shape
    if head_dim % VEC or 32 % (head_dim // VEC):
        raise KernelUnsupported(f"head_dim {head_dim} is not 8 x a divisor of 32 (the kernel's lane layout)")
    if queries.ndim not in (3, 4) or queries.shape[0] != plan.batch or queries.shape[-1] != head_dim \
            or (queries.ndim == 4 and queries.shape[2] != 1) or queries.shape[1] % n_kv:
        raise KernelUnsupported(f"queries {tuple(queries.shape)} do not fit B={plan.batch}, {n_kv} KV heads, "
                                f"D={head_dim}")
    if plan.slab_blocks != slab_blocks or plan.block_size != block_size or plan.num_slabs != len(k_slabs):
        raise KernelUnsupported("plan was made for another slab geometry")
    return queries.shape[1], n_kv, head_dim, block_size


def _launch(k_slabs, v_slabs, plan: DecodePlan, meta, n_q: int, n_kv: int, head_dim: int,
            block_size: int) -> _Launch:
    """Read ``meta`` (the array the kernel is given) into the launch's fields."""
    from pool.kernels.paged_decode_cuda import unroll_for

    meta = np.asarray(plan.meta if meta is None else np.array(meta), dtype=np.int32)
    batch, splits = plan.batch, plan.num_splits
    slab_blocks, stride, chunk = int(meta[0]), int(meta[1]), int(meta[2])
    bounds = meta[META_HEADER:META_HEADER + 2 * batch].reshape(batch, 2).astype(np.int64)
    split_starts = np.arange(splits, dtype=np.int64) * chunk
    c0 = np.maximum(bounds[:, :1], split_starts[None, :])
    c1 = np.minimum(bounds[:, 1:], split_starts[None, :] + chunk)
    table = meta[META_HEADER + 2 * batch:META_HEADER + 2 * batch + batch * stride].reshape(batch, stride)
    return _Launch(batch=batch, splits=splits, n_kv=n_kv, group=n_q // n_kv, head_dim=head_dim,
                   block_size=block_size, slab_blocks=slab_blocks, unroll=unroll_for(block_size, head_dim),
                   qscale=meta[3:4].view(F32)[0] * LOG2E, c0=c0, c1=c1, table=table.astype(np.int64),
                   keys=np.stack([_to_numpy(s) for s in k_slabs]), values=np.stack([_to_numpy(s) for s in v_slabs]))


def _load(launch: _Launch, blk: np.ndarray, active: np.ndarray, t: np.ndarray):
    """The K and V rows of token ``t`` [TPW] of block ``blk`` [B, S, W] as [B, S, KV, W, TPW, D] (zeros where the
    token is invalid, as the kernel loads them) and the validity mask [B, S, 1, W, TPW]."""
    bs = launch.block_size
    pos = blk[..., None] * bs + t
    valid = active[..., None] & (t < bs) & (pos >= launch.c0[:, :, None, None]) & (pos < launch.c1[:, :, None, None])
    safe_blk = np.clip(blk, 0, launch.table.shape[1] - 1)
    row = np.where(active, launch.table[np.arange(launch.batch)[:, None, None], safe_blk], 0)
    slab, local = row // launch.slab_blocks, row % launch.slab_blocks
    # head-major slabs [S, R, KV, bs, D]: the three index arrays broadcast to [B, S, W, TPW] and lead, then KV, D
    index = (slab[..., None], local[..., None], slice(None), np.minimum(t, bs - 1))
    keys = np.where(valid[..., None, None], launch.keys[index], F32(0)).transpose(0, 1, 4, 2, 3, 5)
    values = np.where(valid[..., None, None], launch.values[index], F32(0)).transpose(0, 1, 4, 2, 3, 5)
    return keys, values, valid[:, :, None]


def _scores(q: np.ndarray, keys: np.ndarray, valid: np.ndarray, launch: _Launch) -> np.ndarray:
    """Per lane an fma chain over its 8 elements, then the butterfly over lanes: [B, S, KV, W, TPW, G]."""
    lanes = launch.lanes
    k = keys.reshape(*keys.shape[:-1], 1, lanes, VEC)          # [B, S, KV, W, TPW, 1, LANES, VEC]
    qq = q.reshape(launch.batch, 1, launch.n_kv, 1, 1, launch.group, lanes, VEC)
    dot = np.zeros(np.broadcast_shapes(k.shape, qq.shape)[:-1], dtype=F32)
    for i in range(VEC):
        dot = _fma(qq[..., i], k[..., i], dot)
    off = lanes // 2
    while off > 0:
        dot = dot + dot[..., np.arange(lanes) ^ off]
        off //= 2
    return np.where(valid[..., None], dot[..., 0], NEG_INF)


def _tile(state, q, launch: _Launch, blk, active, t0: int):
    """One warp step of UNROLL tokens per lane group: one max and correction, then the weights token by token."""
    m, l, acc = state
    sub = np.arange(launch.tokens_per_step)
    scores, values = [], []
    for u in range(launch.unroll):
        keys, vals, valid = _load(launch, blk, active, t0 + u * launch.tokens_per_step + sub)
        scores.append(_scores(q, keys, valid, launch))
        values.append(vals[..., None, :])                      # [B, S, KV, W, TPW, 1, D]: shared by the group
    tile_max = scores[0]
    for score in scores[1:]:
        tile_max = np.maximum(tile_max, score)
    m_new = np.maximum(m, tile_max)
    corr = np.exp2(m - m_new)
    l, acc = l * corr, acc * corr[..., None]
    weights = [np.exp2(score - m_new) for score in scores]
    for p in weights:
        l = l + p
    for p, v in zip(weights, values):
        acc = _fma(p[..., None], v, acc)
    return m_new, l, acc


def _merge_token_lanes(state, launch: _Launch):
    """The xor butterfly over the TPW token lanes of each warp (lane offsets LANES, 2 LANES, ... < 32)."""
    m, l, acc = state
    step = 1
    while step < launch.tokens_per_step:
        partner = np.arange(launch.tokens_per_step) ^ step
        m_o, l_o, acc_o = m[:, :, :, :, partner], l[:, :, :, :, partner], acc[:, :, :, :, partner]
        m_new = np.maximum(m, m_o)
        a, c = np.exp2(m - m_new), np.exp2(m_o - m_new)
        l = l * a + l_o * c
        acc = acc * a[..., None] + acc_o * c[..., None]
        m, step = m_new, step * 2
    return m[:, :, :, :, 0], l[:, :, :, :, 0], acc[:, :, :, :, 0]


def _merge_in_order(m, l, acc, axis: int):
    """Merge online-softmax states along ``axis`` one after another (warps through shared memory, or splits in
    the merge pass): the max first, then l and acc summed in order. Returns (m, l, acc) without that axis."""
    m_all = np.full(np.delete(m.shape, axis), NEG_BIG, dtype=F32)
    for i in range(m.shape[axis]):
        m_all = np.maximum(m_all, np.take(m, i, axis=axis))
    l_all = np.zeros_like(m_all)
    a_all = np.zeros(np.delete(acc.shape, axis), dtype=F32)
    for i in range(m.shape[axis]):
        f = np.exp2(np.take(m, i, axis=axis) - m_all)
        l_all = l_all + np.take(l, i, axis=axis) * f
        a_all = a_all + np.take(acc, i, axis=axis) * f[..., None]
    return m_all, l_all, a_all


def paged_decode_emulated(queries, k_slabs: Sequence, v_slabs: Sequence, plan: DecodePlan, *, meta=None):
    """The fused kernel's attention of one new token per sequence, computed on the CPU as the kernel computes it.

    queries: [B, Hq, D] or [B, Hq, 1, D]; k_slabs/v_slabs: the layer's slab tensors, each [slab_blocks,
    n_kv_heads, block_size, D]; plan: ``pool.kernels.plan.plan_decode``; ``meta``: the plan's meta array as the
    kernel would be given it (default ``plan.meta``). Returns an mx.array shaped and typed like ``queries``.
    Evaluates its inputs (it reads them on the host); mutates nothing."""
    import mlx.core as mx

    n_q, n_kv, head_dim, block_size = _check(queries, k_slabs, v_slabs, plan)
    launch = _launch(k_slabs, v_slabs, plan, meta, n_q, n_kv, head_dim, block_size)
    q = _to_numpy(queries).reshape(launch.batch, n_kv, launch.group, head_dim) * launch.qscale
    lead = (launch.batch, launch.splits, n_kv, NUM_WARPS, launch.tokens_per_step, launch.group)
    state = (np.full(lead, NEG_BIG, dtype=F32), np.zeros(lead, dtype=F32), np.zeros((*lead, head_dim), dtype=F32))
    nonempty = launch.c0 < launch.c1
    blk_first = np.where(nonempty, launch.c0 // block_size, 0)
    blk_last = np.where(nonempty, (launch.c1 - 1) // block_size, -1)
    rounds = int(-(-(blk_last - blk_first + 1).max() // NUM_WARPS)) if nonempty.any() else 0
    warps = np.arange(NUM_WARPS)
    step = launch.tokens_per_step * launch.unroll
    for j in range(rounds):  # warp w takes blocks blk_first + w, + 4 + w, ...
        blk = blk_first[:, :, None] + warps + NUM_WARPS * j
        active = nonempty[:, :, None] & (blk <= blk_last[:, :, None])
        for t0 in range(0, block_size, step):
            state = _tile(state, q, launch, blk, active, t0)
    m, l, acc = _merge_in_order(*_merge_token_lanes(state, launch), axis=3)   # warps: [B, S, KV, G]
    if launch.splits > 1:
        m, l, acc = _merge_in_order(m, l, acc, axis=1)                          # the merge pass over splits
    else:
        l, acc = l[:, 0], acc[:, 0]
    out = np.where((l > 0)[..., None], acc / np.where(l > 0, l, F32(1))[..., None], F32(0))
    return mx.array(out.reshape(launch.batch, n_q, head_dim)).astype(queries.dtype).reshape(queries.shape)


# ------------------------------------------------------------------------------------------------ table route
class EmulatedTable(tuple):
    """The CPU emulation's slab table: entry s is ``(K, V)`` of slab s *as it was when the entry was written* (a
    snapshot of the array, the emulation's device address: a later write that the table did not refresh leaves it
    holding the old contents, as a stale address would), or None (never written: zero on the device)."""


class EmulatedTableWriter:
    """``slab_table.TableWriter`` of the emulation: the same copy-and-overwrite as the CUDA update kernel."""

    def update(self, table, slots, slots_array, keys, values, capacity: int) -> EmulatedTable:
        import mlx.core as mx

        entries = list(table or ())[:capacity]
        entries += [None] * (capacity - len(entries))
        written = dict(zip(np.asarray(slots_array).tolist(), zip(keys, values)))  # what the kernel reads: the array
        for slab, (k, v) in written.items():
            entries[slab] = (mx.array(k), mx.array(v))  # mx.array(x) keeps x's current value (a later write to x
        return EmulatedTable(entries)                   # replaces x's, not this one's)


class EmulatedTableLaunch:
    """The table route's launch, emulated: reads the slabs the table's entries hold (NaN for an entry never
    written), then computes what the kernel computes (``paged_decode_emulated``)."""

    def __init__(self, queries, k_slabs, v_slabs, plan: DecodePlan, meta=None):
        _check(queries, k_slabs, v_slabs, plan)
        self.plan, self.meta, self.num_slabs = plan, meta, len(k_slabs)
        self.shape, self.dtype = tuple(k_slabs[0].shape), k_slabs[0].dtype

    def fits(self, queries, k_slabs, v_slabs) -> bool:
        return len(k_slabs) == self.num_slabs and tuple(k_slabs[0].shape) == self.shape

    def __call__(self, queries, table: EmulatedTable):
        import mlx.core as mx

        if len(table) < self.num_slabs:
            raise KernelUnsupported(f"slab table of {len(table)} entries for {self.num_slabs} slabs")
        poison = mx.full(self.shape, float("nan"), dtype=self.dtype)
        entries = [entry or (poison, poison) for entry in table[:self.num_slabs]]
        return paged_decode_emulated(queries, [k for k, _ in entries], [v for _, v in entries], self.plan,
                                     meta=self.meta)


class EmulatedTableKernel:
    """The table route on the CPU (``paged_decode.TABLE_KERNELS``' interface): tests and benchmarks register it
    for a pretend backend to run the route's refresh rule and indexing without a GPU."""

    name = "emulated-slab-table"

    def writer(self, dtype: str) -> EmulatedTableWriter:
        return EmulatedTableWriter()

    def prepare(self, queries, k_slabs, v_slabs, plan, meta):
        return EmulatedTableLaunch(queries, k_slabs, v_slabs, plan, meta)
