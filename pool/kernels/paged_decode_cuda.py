"""Fused paged-attention decode for MLX on CUDA: one query token per sequence, K/V read straight from every slab
through the block table, no gather copy.

Two builds of the same kernel body: normally each variant is compiled by us with NVRTC into a persistent cubin
cache, off the decode path (``cuda_variants.py``, ``cuda_builds.py``), and launched with
``mx.fast.precompiled_cuda_kernel``; when NVRTC cannot be loaded (or ``SLABSCOPE_CUDA_BUILD=mlx``) it falls back to
``mx.fast.cuda_kernel``, whose JIT compiles every variant in the first decode step that needs it, in every
process (MLX never writes custom kernels to its disk cache: ~2 s per variant on an H200).

Design (docs/gpu.md has the full write-up; the measurements are in docs/measurements-log.md):

* One thread block per (split, KV head, sequence); 4 warps. A token's head row (head_dim elements) is spread over
  head_dim/8 lanes, each holding 8 elements (one 16-byte load), so a warp reads 2 (head_dim 128) or 4 (head_dim
  64) tokens per step, ``UNROLL`` steps in flight (``KernelTuning.unroll``, carried by the plan). All GROUP query
  heads of the KV head are processed together, so every K/V byte is read once per launch (GQA costs no extra
  traffic).
* Warps take whole blocks of the pool round-robin; the block's physical row resolves once per block to
  (slab, row in slab) and a slab base pointer from a shared-memory table filled from the kernel's slab inputs
  ``k0..kN-1`` / ``v0..vN-1``. ``mx.fast.cuda_kernel`` takes a fixed list of inputs, so one kernel is generated
  per slab-count bucket (``plan.slab_bucket``: under 1/3 padding, repeating slab 0, never read).
* Online softmax in float32 (log2 domain, ``exp2f``), one max/correction per UNROLL tile; warps merge through
  shared memory. Long contexts are split into chunks (``pool.kernels.plan.choose_splits``) whose partial states a
  second small kernel merges; with one split the first kernel writes the output directly.

Kernel names carry a hash of their source, so an edited kernel never reuses a stale binary in either build. This
module imports mlx only inside functions.
"""

from __future__ import annotations

import functools
from typing import Sequence

from pool.kernels.kernel_build import PagedDecodeKernels
from pool.kernels.plan import (DecodePlan, KernelUnsupported, slab_bucket, tokens_per_warp_step,
                               unsupported_reason)
from pool.kernels.tuning import DEFAULT_TUNING

MAX_SLABS = 512               # slab inputs per launch: 2 * 512 pointers = 8 KiB of kernel parameters (< 32 KiB)
THREADS = 128                 # 4 warps per block

# Shared by both builds: constants and the 16-byte unpack (T's ``ssp_to_float`` comes from the build's prelude).
COMMON_HEADER = r"""
#define SSP_NEG_INF __int_as_float(0xff800000)
#define SSP_NEG_BIG (-1.0e30f)
#define SSP_LOG2E 1.4426950408889634f
"""

UNPACK = r"""
// 8 half-precision values packed in 16 bytes -> 8 floats.
template <typename T>
__device__ __forceinline__ void ssp_unpack8(const uint4& raw, float* out) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    out[i] = ssp_to_float(e[i]);
  }
}
"""

# MLX's cuda_kernel build (the fallback): MLX's device headers define __half / __nv_bfloat16 and their conversions.
MLX_CONVERSIONS = r"""
__device__ __forceinline__ float ssp_to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float ssp_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void ssp_store(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ void ssp_store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
"""

HEADER = COMMON_HEADER + MLX_CONVERSIONS + UNPACK

# Pass 1. Template constants: T, HEAD_DIM, GROUP, N_KV, BLOCK_SIZE, UNROLL (and NUM_SLABS on the per-slab route).
# {slab_decl}/{slab_setup} declare and fill the slab pointers; {k_base}/{v_base} give slab ``slab``'s K/V base;
# {epilogue} writes the output (direct) or the split's partials.
PASS1_SOURCE = r"""
  constexpr int VEC = 8;
  constexpr int LANES = HEAD_DIM / VEC;
  constexpr int TPW = 32 / LANES;
  constexpr int STEP = TPW * UNROLL;
  constexpr int NUM_WARPS = 4;
  constexpr int HQ = N_KV * GROUP;
  // head-major rows [N_KV, BLOCK_SIZE, HEAD_DIM]: one head's tokens of a row are packed
  constexpr long long TOKEN_STRIDE = HEAD_DIM;
  constexpr long long HEAD_STRIDE = (long long)BLOCK_SIZE * HEAD_DIM;
  constexpr long long ROW_STRIDE = (long long)N_KV * HEAD_STRIDE;
  static_assert(HEAD_DIM % 8 == 0 && 32 % LANES == 0, "head_dim must be 8 * a divisor of 32");
  static_assert(BLOCK_SIZE % STEP == 0, "a warp step must not cross a block");

{slab_decl}
  __shared__ float sm_m[NUM_WARPS][GROUP];
  __shared__ float sm_l[NUM_WARPS][GROUP];
  __shared__ float sm_acc[NUM_WARPS][GROUP][HEAD_DIM];

{slab_setup}
  __syncthreads();

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int sub = lane / LANES;
  const int part = lane % LANES;
  const int split = blockIdx.x;
  const int kvh = blockIdx.y;
  const int b = blockIdx.z;
  const int num_splits = gridDim.x;
  const int batch = gridDim.z;

  const int slab_blocks = meta[0];
  const int table_stride = meta[1];
  const int chunk = meta[2];
  const float qscale = __int_as_float(meta[3]) * SSP_LOG2E;
  const int seq_start = meta[4 + 2 * b];
  const int seq_end = meta[5 + 2 * b];
  const int* table = meta + 4 + 2 * batch + (long long)b * table_stride;
  const int c0 = max(seq_start, split * chunk);
  const int c1 = min(seq_end, (split + 1) * chunk);

  float q[GROUP][VEC];
  float acc[GROUP][VEC];
  float m[GROUP];
  float l[GROUP];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    const T* qrow = queries + ((long long)b * HQ + kvh * GROUP + g) * HEAD_DIM + part * VEC;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      q[g][i] = ssp_to_float(qrow[i]) * qscale;
      acc[g][i] = 0.0f;
    }
    m[g] = SSP_NEG_BIG;
    l[g] = 0.0f;
  }

  if (c0 < c1) {
    const int blk_first = c0 / BLOCK_SIZE;
    const int blk_last = (c1 - 1) / BLOCK_SIZE;
    for (int blk = blk_first + warp; blk <= blk_last; blk += NUM_WARPS) {
      const int row = table[blk];
      const int slab = row / slab_blocks;
      const long long base =
          (long long)(row - slab * slab_blocks) * ROW_STRIDE + (long long)kvh * HEAD_STRIDE + part * VEC;
      const T* kb = {k_base} + base;
      const T* vb = {v_base} + base;
      const int pos0 = blk * BLOCK_SIZE;
      for (int t0 = 0; t0 < BLOCK_SIZE; t0 += STEP) {
        uint4 kr[UNROLL];
        uint4 vr[UNROLL];
        bool valid[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          const int t = t0 + u * TPW + sub;
          const int pos = pos0 + t;
          valid[u] = pos >= c0 && pos < c1;
          if (valid[u]) {
            kr[u] = *reinterpret_cast<const uint4*>(kb + t * TOKEN_STRIDE);
            vr[u] = *reinterpret_cast<const uint4*>(vb + t * TOKEN_STRIDE);
          } else {
            kr[u] = make_uint4(0u, 0u, 0u, 0u);
            vr[u] = make_uint4(0u, 0u, 0u, 0u);
          }
        }
        float score[GROUP][UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          float kf[VEC];
          ssp_unpack8<T>(kr[u], kf);
#pragma unroll
          for (int g = 0; g < GROUP; ++g) {
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
              dot = fmaf(q[g][i], kf[i], dot);
            }
#pragma unroll
            for (int off = LANES / 2; off > 0; off >>= 1) {
              dot += __shfl_xor_sync(0xffffffffu, dot, off);
            }
            score[g][u] = valid[u] ? dot : SSP_NEG_INF;
          }
        }
        // Rescale each head's state to the tile's max once, turning scores into weights in place.
#pragma unroll
        for (int g = 0; g < GROUP; ++g) {
          float tile_max = score[g][0];
#pragma unroll
          for (int u = 1; u < UNROLL; ++u) {
            tile_max = fmaxf(tile_max, score[g][u]);
          }
          const float m_new = fmaxf(m[g], tile_max);
          const float corr = exp2f(m[g] - m_new);
          l[g] *= corr;
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            acc[g][i] *= corr;
          }
#pragma unroll
          for (int u = 0; u < UNROLL; ++u) {
            score[g][u] = exp2f(score[g][u] - m_new);
            l[g] += score[g][u];
          }
          m[g] = m_new;
        }
        // V converted one token at a time (8 live floats, not UNROLL * 8) and shared by the group's heads.
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          float vf[VEC];
          ssp_unpack8<T>(vr[u], vf);
#pragma unroll
          for (int g = 0; g < GROUP; ++g) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
              acc[g][i] = fmaf(score[g][u], vf[i], acc[g][i]);
            }
          }
        }
      }
    }
  }

  // Merge the TPW token lanes of each warp (lanes that share `part`).
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
#pragma unroll
    for (int off = LANES; off < 32; off <<= 1) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float l_o = __shfl_xor_sync(0xffffffffu, l[g], off);
      const float m_new = fmaxf(m[g], m_o);
      const float a = exp2f(m[g] - m_new);
      const float c = exp2f(m_o - m_new);
      l[g] = l[g] * a + l_o * c;
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float acc_o = __shfl_xor_sync(0xffffffffu, acc[g][i], off);
        acc[g][i] = acc[g][i] * a + acc_o * c;
      }
      m[g] = m_new;
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      if (part == 0) {
        sm_m[warp][g] = m[g];
        sm_l[warp][g] = l[g];
      }
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        sm_acc[warp][g][part * VEC + i] = acc[g][i];
      }
    }
  }
  __syncthreads();

  // Merge the warps; one thread per (query head of the group, element).
  for (int idx = threadIdx.x; idx < GROUP * HEAD_DIM; idx += blockDim.x) {
    const int g = idx / HEAD_DIM;
    const int d = idx % HEAD_DIM;
    float m_all = SSP_NEG_BIG;
#pragma unroll
    for (int w = 0; w < NUM_WARPS; ++w) {
      m_all = fmaxf(m_all, sm_m[w][g]);
    }
    float l_all = 0.0f;
    float a_all = 0.0f;
#pragma unroll
    for (int w = 0; w < NUM_WARPS; ++w) {
      const float f = exp2f(sm_m[w][g] - m_all);
      l_all += sm_l[w][g] * f;
      a_all += sm_acc[w][g][d] * f;
    }
    const long long head = (long long)b * HQ + kvh * GROUP + g;
{epilogue}
  }
"""

DIRECT_EPILOGUE = r"""
    ssp_store(out + head * HEAD_DIM + d, l_all > 0.0f ? a_all / l_all : 0.0f);"""

SPLIT_EPILOGUE = r"""
    const long long slot = head * num_splits + split;
    part_acc[slot * HEAD_DIM + d] = a_all;
    if (d == 0) {
      part_ml[2 * slot] = m_all;
      part_ml[2 * slot + 1] = l_all;
    }"""

# Pass 2: merge the splits of one (sequence, query head); one thread per element. Template: T, HEAD_DIM.
MERGE_SOURCE = r"""
  const int d = threadIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int hq = gridDim.y;
  const int num_splits = {num_splits};
  const long long first = ((long long)b * hq + h) * num_splits;
  float m_all = SSP_NEG_BIG;
  for (int s = 0; s < num_splits; ++s) {
    m_all = fmaxf(m_all, part_ml[2 * (first + s)]);
  }
  float l_all = 0.0f;
  float a_all = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float f = exp2f(part_ml[2 * (first + s)] - m_all);
    l_all += part_ml[2 * (first + s) + 1] * f;
    a_all += part_acc[(first + s) * HEAD_DIM + d] * f;
  }
  ssp_store(out + ((long long)b * hq + h) * HEAD_DIM + d, l_all > 0.0f ? a_all / l_all : 0.0f);
"""


def slab_setup_source(num_slabs: int, threads: int = THREADS) -> str:
    """CUDA that fills the shared k_ptrs/v_ptrs tables from the kernel's slab parameters: thread t stores slabs
    t, t + threads, ... (a switch, so each thread executes only its own stores)."""
    cases = []
    for t in range(min(num_slabs, threads)):
        stores = " ".join(f"k_ptrs[{s}] = k{s}; v_ptrs[{s}] = v{s};" for s in range(t, num_slabs, threads))
        cases.append(f"    case {t}: {stores} break;")
    return "  switch (threadIdx.x) {\n" + "\n".join(cases) + "\n    default: break;\n  }"


PER_SLAB_DECL = """  __shared__ const T* k_ptrs[NUM_SLABS];
  __shared__ const T* v_ptrs[NUM_SLABS];"""

# The table route (num_slabs 0): input ``slab_table`` holds slab s's K address at 2 s and V's at 2 s + 1
# (pool/kernels/slab_table.py); a warp reads its block's two entries once per block (8 bytes each, cached in L1).
TABLE_K_BASE = "reinterpret_cast<const T*>(slab_table[2 * slab])"
TABLE_V_BASE = "reinterpret_cast<const T*>(slab_table[2 * slab + 1])"


def pass1_source(num_slabs: int, direct: bool) -> str:
    """The first pass's body: ``num_slabs`` slab inputs ``k0..``/``v0..`` copied to shared pointer tables, or with
    ``num_slabs == 0`` the table route (one ``slab_table`` input, no slab-count constant)."""
    if num_slabs:
        parts = {"{slab_decl}": PER_SLAB_DECL, "{slab_setup}": slab_setup_source(num_slabs),
                 "{k_base}": "k_ptrs[slab]", "{v_base}": "v_ptrs[slab]"}
    else:
        parts = {"{slab_decl}": "", "{slab_setup}": "", "{k_base}": TABLE_K_BASE, "{v_base}": TABLE_V_BASE}
    source = PASS1_SOURCE
    for placeholder, text in parts.items():
        source = source.replace(placeholder, text)
    return source.replace("{epilogue}", DIRECT_EPILOGUE if direct else SPLIT_EPILOGUE)


_KERNELS = PagedDecodeKernels("cuda_kernel", HEADER, pass1_source, MERGE_SOURCE.replace("{num_splits}", "part_ml_shape[2]"))
pass1_kernel = _KERNELS.pass1
merge_kernel = _KERNELS.merge


def table_pass1_kernel(direct: bool):
    """MLX's cuda_kernel build of the table route's first pass (inputs: queries, meta, slab_table)."""
    return _KERNELS.pass1(0, direct)


def output_layout(plan: DecodePlan, queries, n_q: int, head_dim: int) -> tuple[bool, list, list]:
    """(direct, output shapes, output dtypes) of a decode launch: one split writes the attention output in the queries'
    own shape; several write float32 partials (values, then max and sum) that the merge kernel reduces. Shared by
    both routes' launches (per-slab inputs and the slab table)."""
    import mlx.core as mx

    if plan.num_splits == 1:
        return True, [tuple(queries.shape)], [queries.dtype]
    return False, [(plan.batch, n_q, plan.num_splits, head_dim), (plan.batch, n_q, plan.num_splits, 2)], \
        [mx.float32, mx.float32]


def unroll_for(block_size: int, head_dim: int, unroll: int = DEFAULT_TUNING.unroll) -> int:
    """Largest power of two <= ``unroll`` (a ``KernelTuning`` knob) whose warp step (tokens_per_warp_step * unroll)
    divides block_size, so a step never crosses into the next block."""
    while unroll > 1 and block_size % (tokens_per_warp_step(head_dim) * unroll):
        unroll //= 2
    return unroll


def _dtype_name(dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def check_inputs(queries, k_slabs: Sequence, v_slabs: Sequence, plan: DecodePlan,
                 max_slabs: int = MAX_SLABS) -> tuple[int, int, int, int]:
    """Validate shapes against the plan; return (n_q_heads, n_kv_heads, head_dim, block_size). ``max_slabs``: the
    route's slab limit (slab inputs per launch; the table route's is far larger).
    Raises KernelUnsupported naming the first problem."""
    if len(k_slabs) != len(v_slabs) or not k_slabs:
        raise KernelUnsupported(f"need as many V slabs as K slabs (>= 1), got {len(k_slabs)}/{len(v_slabs)}")
    shape = tuple(k_slabs[0].shape)
    if len(shape) != 4:
        raise KernelUnsupported(f"slabs must be [slab_blocks, n_kv_heads, block_size, head_dim], got {shape}")
    # The pool's slabs share one geometry by construction; checking the ends keeps this O(1) per call (a launch
    # may take hundreds of slabs; a decode step checks once per plan, ``CudaLaunch``).
    for slab in (k_slabs[-1], v_slabs[0], v_slabs[-1]):
        if tuple(slab.shape) != shape or slab.dtype != queries.dtype:
            raise KernelUnsupported("every slab must share one shape and the queries' dtype")
    if k_slabs[0].dtype != queries.dtype:
        raise KernelUnsupported("slabs and queries must share one dtype")
    slab_blocks, n_kv, block_size, head_dim = shape
    if queries.ndim not in (3, 4) or queries.shape[0] != plan.batch or queries.shape[-1] != head_dim \
            or (queries.ndim == 4 and queries.shape[2] != 1):
        raise KernelUnsupported(f"queries must be [B, Hq, D] or [B, Hq, 1, D] with B={plan.batch}, D={head_dim}; "
                                f"got {tuple(queries.shape)}")
    if plan.slab_blocks != slab_blocks or plan.block_size != block_size or plan.num_slabs != len(k_slabs):
        raise KernelUnsupported("plan was made for another slab geometry")
    n_q = queries.shape[1]
    reason = unsupported_reason(dtype=_dtype_name(queries.dtype), head_dim=head_dim, n_q_heads=n_q,
                                n_kv_heads=n_kv, block_size=block_size, num_slabs=len(k_slabs),
                                max_slabs=max_slabs, slab_elements=k_slabs[0].size)
    if reason:
        raise KernelUnsupported(reason)
    return n_q, n_kv, head_dim, block_size


def paged_decode_cuda(queries, k_slabs: Sequence, v_slabs: Sequence, plan: DecodePlan, *, meta=None):
    """Attention of one new token per sequence over its paged K/V: ``softmax(q k^T * scale) v`` per query head.

    queries: [B, Hq, D] or [B, Hq, 1, D] (fp16/bf16); k_slabs/v_slabs: the layer's slabs, each
    [slab_blocks, n_kv_heads, block_size, D]; plan: ``pool.kernels.plan.plan_decode`` (block tables, visible
    ranges, scale, splits, and the tuning whose unroll picks the kernel variant). ``meta`` may pass ``mx.array(plan.meta)`` made once by the caller. Returns an array
    shaped like ``queries``. Reads only; mutates nothing. Raises KernelUnsupported on shapes it cannot run."""
    return CudaLaunch(queries, k_slabs, v_slabs, plan, meta=meta)(queries, k_slabs, v_slabs)


class CudaLaunch:
    """One plan's launch, prepared once and reused by every layer of a decode step that it fits.

    Preparing checks the inputs against the plan (``check_inputs``), picks the slab bucket, finds the kernel
    variants' binaries (or the JIT fallback's template) and fixes the grid and output shapes: ~50 us of host time
    that a 28-layer step used to spend in every layer. A later layer only proves it fits (``fits``: slab count, slab
    and query shapes, dtype; the caller verified its tables equal the plan's) and hands over its slabs. Holds the
    plan and its meta array; reads the slabs it is called with; mutates nothing."""

    def __init__(self, queries, k_slabs: Sequence, v_slabs: Sequence, plan: DecodePlan, *, meta=None):
        import mlx.core as mx

        from pool.kernels.cuda_builds import process_builds

        n_q, n_kv, head_dim, block_size = check_inputs(queries, k_slabs, v_slabs, plan)
        self.plan = plan
        self.num_slabs = len(k_slabs)
        self.pad = slab_bucket(self.num_slabs) - self.num_slabs
        self.slab_shape, self.dtype = tuple(k_slabs[0].shape), queries.dtype
        self.query_shape = tuple(queries.shape)
        # The kernels index queries and outputs as flat [B, Hq, D] rows: a [B, Hq, 1, D] array has the same layout,
        # so both are passed and made in the queries' own shape (no reshape op per layer on either side)
        self.meta = mx.array(plan.meta) if meta is None else meta
        self.grid = (THREADS * plan.num_splits, n_kv, plan.batch)
        self.direct, self.out_shapes, self.out_dtypes = output_layout(plan, queries, n_q, head_dim)
        self.merge_grid = (head_dim, n_q, plan.batch)
        self.head_dim = head_dim
        bucket = self.num_slabs + self.pad
        unroll = unroll_for(block_size, head_dim, plan.tuning.unroll)
        self.builds = process_builds()
        if self.builds is None:  # MLX's cuda_kernel JIT (no NVRTC of our own): the fallback build
            self.template = [("T", queries.dtype), ("HEAD_DIM", head_dim), ("GROUP", n_q // n_kv), ("N_KV", n_kv),
                             ("BLOCK_SIZE", block_size), ("UNROLL", unroll), ("NUM_SLABS", bucket)]
        else:
            self.first, self.merge = launch_binaries(self.builds, _dtype_name(queries.dtype), head_dim, n_q, n_kv,
                                                     block_size, bucket, self.direct, unroll)

    def fits(self, queries, k_slabs: Sequence, v_slabs: Sequence) -> bool:
        """True when this launch can run on these slabs and queries: the plan's slab count, the same slab shape
        and dtype (K and V), the same query shape. O(1): a layer's slabs share one shape by construction."""
        if len(k_slabs) != self.num_slabs or len(v_slabs) != self.num_slabs:  # num_slabs >= 1 (check_inputs)
            return False
        k0, v0 = k_slabs[0], v_slabs[0]
        return (tuple(queries.shape) == self.query_shape and queries.dtype == self.dtype
                and k0.dtype == self.dtype and v0.dtype == self.dtype
                and tuple(k0.shape) == self.slab_shape and tuple(v0.shape) == self.slab_shape)

    def __call__(self, queries, k_slabs: Sequence, v_slabs: Sequence):
        """Launch on one layer's slabs (``fits`` must hold); returns the attention output shaped like queries."""
        import mlx.core as mx

        pad = self.pad
        inputs = [queries, self.meta, *k_slabs, *([k_slabs[0]] * pad), *v_slabs,
                  *([v_slabs[0]] * pad)]
        plan, head_dim = self.plan, self.head_dim
        merge_out = [self.query_shape]
        if self.builds is None:
            kernel = pass1_kernel(self.num_slabs + pad, self.direct)
            outs = kernel(inputs=inputs, template=self.template, grid=self.grid, threadgroup=(THREADS, 1, 1),
                          output_shapes=self.out_shapes, output_dtypes=self.out_dtypes)
            if self.direct:
                return outs[0]
            (out,) = merge_kernel()(
                inputs=list(outs), template=[("T", queries.dtype), ("HEAD_DIM", head_dim)], grid=self.merge_grid,
                threadgroup=(head_dim, 1, 1), output_shapes=merge_out, output_dtypes=[queries.dtype])
            return out
        outs = mx.fast.precompiled_cuda_kernel(name=self.first[0], compiled_source=self.first[1], inputs=inputs,
                                               output_shapes=self.out_shapes, output_dtypes=self.out_dtypes,
                                               scalars=[], grid=self.grid, threadgroup=(THREADS, 1, 1),
                                               ensure_row_contiguous=True)
        if self.direct:
            return outs[0]
        (out,) = mx.fast.precompiled_cuda_kernel(name=self.merge[0], compiled_source=self.merge[1],
                                                 inputs=list(outs), output_shapes=merge_out,
                                                 output_dtypes=[queries.dtype], scalars=[plan.num_splits],
                                                 grid=self.merge_grid, threadgroup=(head_dim, 1, 1),
                                                 ensure_row_contiguous=True)
        return out


@functools.lru_cache(maxsize=64)
def launch_binaries(builds, dtype: str, head_dim: int, n_q: int, n_kv: int, block_size: int, bucket: int,
                    direct: bool, unroll: int) -> tuple[tuple[str, bytes], tuple[str, bytes] | None]:
    """((name, binary) of the first pass, (name, binary) of the merge pass or None when ``direct``) of a launch
    through ``builds`` (``KernelBuilds``). Memoised: a decode step prepares one ``CudaLaunch`` per plan and callers
    of ``paged_decode_cuda`` (benchmarks, tests) one per call, all with the same arguments, and deriving the
    variants and looking up their binaries cost ~10 us of host time each. ``unroll`` (already fitted to the block,
    ``unroll_for``) is part of the key, so a tuning run never gets another unroll's binary. A binary never changes
    once built; a build error is not cached."""
    geometry = kernel_geometry(dtype, head_dim, n_q, n_kv, block_size, unroll)
    direct_variant, split_variant, merge_variant = geometry.variants(bucket)
    first = builds.binary(direct_variant if direct else split_variant)
    return first, None if direct else builds.binary(merge_variant)


def kernel_geometry(dtype: str, head_dim: int, n_q_heads: int, n_kv_heads: int, block_size: int,
                    unroll: int = DEFAULT_TUNING.unroll):
    """The ``cuda_variants.KernelGeometry`` of a layer (``unroll`` fitted to the block by ``unroll_for``)."""
    from pool.kernels.cuda_variants import KernelGeometry

    return KernelGeometry(dtype=dtype, head_dim=head_dim, group=n_q_heads // n_kv_heads, n_kv=n_kv_heads,
                          block_size=block_size, unroll=unroll_for(block_size, head_dim, unroll))
