"""Fused paged-attention decode for MLX on Metal (``mx.fast.metal_kernel``), same interface and algorithm as
``paged_decode_cuda.py``. UNVERIFIED: it has never run (no Mac was available); tests/gpu/test_paged_decode.py runs it
against the gather path wherever ``mx.metal.is_available()``, and docs/gpu.md says so until it has passed there.

Differences from the CUDA kernel, forced by Metal:
* A Metal kernel takes at most 31 buffers, so at most ``MAX_SLABS`` = 12 slabs (2 x 12 slab buffers + queries,
  meta and the outputs); a layer with more slabs is declined (KernelUnsupported -> gather).
* The slab base pointer is chosen by a ``switch`` once per block (device pointers are not stored in threadgroup
  memory); K/V elements are read one by one (no 16-byte vector loads).
This module imports mlx only inside functions.
"""

from __future__ import annotations

from typing import Sequence

from pool.kernels.kernel_build import PagedDecodeKernels
from pool.kernels.plan import DecodePlan, KernelUnsupported

MAX_SLABS = 12
THREADS = 128

HEADER = r"""
#define SSP_NEG_BIG (-1.0e30f)
#define SSP_LOG2E 1.4426950408889634f
"""

PASS1_SOURCE = r"""
  constexpr int VEC = 8;
  constexpr int LANES = HEAD_DIM / VEC;
  constexpr int TPW = 32 / LANES;
  constexpr int STEP = TPW * UNROLL;
  constexpr int NUM_WARPS = 4;
  constexpr int HQ = N_KV * GROUP;
  // head-major rows [N_KV, BLOCK_SIZE, HEAD_DIM]: one head's tokens of a row are packed
  constexpr long TOKEN_STRIDE = HEAD_DIM;
  constexpr long HEAD_STRIDE = (long)BLOCK_SIZE * HEAD_DIM;
  constexpr long ROW_STRIDE = (long)N_KV * HEAD_STRIDE;

  threadgroup float sm_m[NUM_WARPS][GROUP];
  threadgroup float sm_l[NUM_WARPS][GROUP];
  threadgroup float sm_acc[NUM_WARPS][GROUP][HEAD_DIM];

  const uint tid = thread_position_in_threadgroup.x;
  const uint lane = thread_index_in_simdgroup;
  const uint warp = simdgroup_index_in_threadgroup;
  const int sub = int(lane) / LANES;
  const int part = int(lane) % LANES;
  const int split = int(threadgroup_position_in_grid.x);
  const int kvh = int(threadgroup_position_in_grid.y);
  const int b = int(threadgroup_position_in_grid.z);
  const int num_splits = int(threadgroups_per_grid.x);
  const int batch = int(threadgroups_per_grid.z);

  const int slab_blocks = meta[0];
  const int table_stride = meta[1];
  const int chunk = meta[2];
  const float qscale = as_type<float>(meta[3]) * SSP_LOG2E;
  const int seq_start = meta[4 + 2 * b];
  const int seq_end = meta[5 + 2 * b];
  const long table_base = 4 + 2 * batch + (long)b * table_stride;
  const int c0 = max(seq_start, split * chunk);
  const int c1 = min(seq_end, (split + 1) * chunk);

  float q[GROUP][VEC];
  float acc[GROUP][VEC];
  float m[GROUP];
  float l[GROUP];
  for (int g = 0; g < GROUP; ++g) {
    const long qrow = ((long)b * HQ + kvh * GROUP + g) * HEAD_DIM + part * VEC;
    for (int i = 0; i < VEC; ++i) {
      q[g][i] = static_cast<float>(queries[qrow + i]) * qscale;
      acc[g][i] = 0.0f;
    }
    m[g] = SSP_NEG_BIG;
    l[g] = 0.0f;
  }

  if (c0 < c1) {
    const int blk_first = c0 / BLOCK_SIZE;
    const int blk_last = (c1 - 1) / BLOCK_SIZE;
    for (int blk = blk_first + int(warp); blk <= blk_last; blk += NUM_WARPS) {
      const int row = meta[table_base + blk];
      const int slab = row / slab_blocks;
      const long base = (long)(row - slab * slab_blocks) * ROW_STRIDE + (long)kvh * HEAD_STRIDE + part * VEC;
      const device T* kb = k0;
      const device T* vb = v0;
{slab_select}
      kb += base;
      vb += base;
      const int pos0 = blk * BLOCK_SIZE;
      for (int t0 = 0; t0 < BLOCK_SIZE; t0 += STEP) {
        float score[GROUP][UNROLL];
        float vf[UNROLL][VEC];
        for (int u = 0; u < UNROLL; ++u) {
          const int t = t0 + u * TPW + sub;
          const int pos = pos0 + t;
          const bool valid = pos >= c0 && pos < c1;
          float kf[VEC];
          for (int i = 0; i < VEC; ++i) {
            kf[i] = valid ? static_cast<float>(kb[t * TOKEN_STRIDE + i]) : 0.0f;
            vf[u][i] = valid ? static_cast<float>(vb[t * TOKEN_STRIDE + i]) : 0.0f;
          }
          for (int g = 0; g < GROUP; ++g) {
            float dot = 0.0f;
            for (int i = 0; i < VEC; ++i) {
              dot = metal::fma(q[g][i], kf[i], dot);
            }
            for (int off = LANES / 2; off > 0; off >>= 1) {
              dot += simd_shuffle_xor(dot, ushort(off));
            }
            score[g][u] = valid ? dot : -INFINITY;
          }
        }
        for (int g = 0; g < GROUP; ++g) {
          float tile_max = score[g][0];
          for (int u = 1; u < UNROLL; ++u) {
            tile_max = metal::max(tile_max, score[g][u]);
          }
          const float m_new = metal::max(m[g], tile_max);
          const float corr = metal::exp2(m[g] - m_new);
          l[g] *= corr;
          for (int i = 0; i < VEC; ++i) {
            acc[g][i] *= corr;
          }
          for (int u = 0; u < UNROLL; ++u) {
            const float p = metal::exp2(score[g][u] - m_new);
            l[g] += p;
            for (int i = 0; i < VEC; ++i) {
              acc[g][i] = metal::fma(p, vf[u][i], acc[g][i]);
            }
          }
          m[g] = m_new;
        }
      }
    }
  }

  for (int g = 0; g < GROUP; ++g) {
    for (int off = LANES; off < 32; off <<= 1) {
      const float m_o = simd_shuffle_xor(m[g], ushort(off));
      const float l_o = simd_shuffle_xor(l[g], ushort(off));
      const float m_new = metal::max(m[g], m_o);
      const float a = metal::exp2(m[g] - m_new);
      const float c = metal::exp2(m_o - m_new);
      l[g] = l[g] * a + l_o * c;
      for (int i = 0; i < VEC; ++i) {
        const float acc_o = simd_shuffle_xor(acc[g][i], ushort(off));
        acc[g][i] = acc[g][i] * a + acc_o * c;
      }
      m[g] = m_new;
    }
  }
  if (sub == 0) {
    for (int g = 0; g < GROUP; ++g) {
      if (part == 0) {
        sm_m[warp][g] = m[g];
        sm_l[warp][g] = l[g];
      }
      for (int i = 0; i < VEC; ++i) {
        sm_acc[warp][g][part * VEC + i] = acc[g][i];
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  for (int idx = int(tid); idx < GROUP * HEAD_DIM; idx += THREADS) {
    const int g = idx / HEAD_DIM;
    const int d = idx % HEAD_DIM;
    float m_all = SSP_NEG_BIG;
    for (int w = 0; w < NUM_WARPS; ++w) {
      m_all = metal::max(m_all, sm_m[w][g]);
    }
    float l_all = 0.0f;
    float a_all = 0.0f;
    for (int w = 0; w < NUM_WARPS; ++w) {
      const float f = metal::exp2(sm_m[w][g] - m_all);
      l_all += sm_l[w][g] * f;
      a_all += sm_acc[w][g][d] * f;
    }
    const long head = (long)b * HQ + kvh * GROUP + g;
{epilogue}
  }
"""

DIRECT_EPILOGUE = r"""
    out[head * HEAD_DIM + d] = static_cast<T>(l_all > 0.0f ? a_all / l_all : 0.0f);"""

SPLIT_EPILOGUE = r"""
    const long slot = head * num_splits + split;
    part_acc[slot * HEAD_DIM + d] = a_all;
    if (d == 0) {
      part_ml[2 * slot] = m_all;
      part_ml[2 * slot + 1] = l_all;
    }"""

MERGE_SOURCE = r"""
  const int d = int(thread_position_in_threadgroup.x);
  const int h = int(threadgroup_position_in_grid.y);
  const int b = int(threadgroup_position_in_grid.z);
  const int hq = int(threadgroups_per_grid.y);
  const int num_splits = part_ml_shape[2];
  const long first = ((long)b * hq + h) * num_splits;
  float m_all = SSP_NEG_BIG;
  for (int s = 0; s < num_splits; ++s) {
    m_all = metal::max(m_all, part_ml[2 * (first + s)]);
  }
  float l_all = 0.0f;
  float a_all = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float f = metal::exp2(part_ml[2 * (first + s)] - m_all);
    l_all += part_ml[2 * (first + s) + 1] * f;
    a_all += part_acc[(first + s) * HEAD_DIM + d] * f;
  }
  out[((long)b * hq + h) * HEAD_DIM + d] = static_cast<T>(l_all > 0.0f ? a_all / l_all : 0.0f);
"""


def metal_slab_bucket(num_slabs: int) -> int:
    """Slab inputs compiled for: next power of two, capped at MAX_SLABS (the buffer limit)."""
    bucket = 1
    while bucket < num_slabs:
        bucket *= 2
    return min(bucket, MAX_SLABS)


def slab_select_source(num_slabs: int) -> str:
    """Metal that points kb/vb at the block's slab (slab 0 is the default above the switch)."""
    cases = "\n".join(f"        case {s}: kb = k{s}; vb = v{s}; break;" for s in range(1, num_slabs))
    if not cases:
        return ""
    return "      switch (slab) {\n" + cases + "\n        default: break;\n      }"


def pass1_source(num_slabs: int, direct: bool) -> str:
    return (PASS1_SOURCE.replace("{slab_select}", slab_select_source(num_slabs))
            .replace("{epilogue}", DIRECT_EPILOGUE if direct else SPLIT_EPILOGUE))


_KERNELS = PagedDecodeKernels("metal_kernel", HEADER, pass1_source, MERGE_SOURCE)
pass1_kernel = _KERNELS.pass1
merge_kernel = _KERNELS.merge


def paged_decode_metal(queries, k_slabs: Sequence, v_slabs: Sequence, plan: DecodePlan, *, meta=None):
    """Same contract as ``pool.kernels.paged_decode_cuda.paged_decode_cuda`` (at most MAX_SLABS slabs)."""
    import mlx.core as mx

    from pool.kernels.paged_decode_cuda import check_inputs, unroll_for

    if len(k_slabs) > MAX_SLABS:
        raise KernelUnsupported(f"{len(k_slabs)} slabs above the Metal kernel's {MAX_SLABS} (31-buffer limit)")
    n_q, n_kv, head_dim, block_size = check_inputs(queries, k_slabs, v_slabs, plan)
    bucket = metal_slab_bucket(len(k_slabs))
    pad_k = [k_slabs[0]] * (bucket - len(k_slabs))
    pad_v = [v_slabs[0]] * (bucket - len(v_slabs))
    q3 = queries.reshape(plan.batch, n_q, head_dim)
    meta_array = mx.array(plan.meta) if meta is None else meta
    template = [("T", queries.dtype), ("HEAD_DIM", head_dim), ("GROUP", n_q // n_kv), ("N_KV", n_kv),
                ("BLOCK_SIZE", block_size), ("UNROLL", unroll_for(block_size, head_dim, plan.tuning.unroll)),
                ("THREADS", THREADS)]
    inputs = [q3, meta_array, *k_slabs, *pad_k, *v_slabs, *pad_v]
    grid = (THREADS * plan.num_splits, n_kv, plan.batch)
    if plan.num_splits == 1:
        (out,) = pass1_kernel(bucket, True)(
            inputs=inputs, template=template, grid=grid, threadgroup=(THREADS, 1, 1),
            output_shapes=[(plan.batch, n_q, head_dim)], output_dtypes=[queries.dtype])
    else:
        part_acc, part_ml = pass1_kernel(bucket, False)(
            inputs=inputs, template=template, grid=grid, threadgroup=(THREADS, 1, 1),
            output_shapes=[(plan.batch, n_q, plan.num_splits, head_dim), (plan.batch, n_q, plan.num_splits, 2)],
            output_dtypes=[mx.float32, mx.float32])
        (out,) = merge_kernel()(
            inputs=[part_acc, part_ml], template=[("T", queries.dtype), ("HEAD_DIM", head_dim)],
            grid=(head_dim, n_q, plan.batch), threadgroup=(head_dim, 1, 1),
            output_shapes=[(plan.batch, n_q, head_dim)], output_dtypes=[queries.dtype])
    return out.reshape(queries.shape)
