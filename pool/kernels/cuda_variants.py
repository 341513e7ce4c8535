"""The CUDA paged-decode kernels as standalone translation units that we compile with NVRTC (``nvrtc.py``) and MLX
launches with ``mx.fast.precompiled_cuda_kernel``.

A *variant* fixes everything the kernel is specialised on: storage dtype, head_dim, GQA group, KV heads, block size,
UNROLL, the slab-count bucket (``plan.slab_bucket``) and the pass (``direct``: one split writes the output;
``split``: writes partial softmax states; ``merge``: combines them). Its source is the same kernel body that
``paged_decode_cuda.py`` hands to ``mx.fast.cuda_kernel`` (the fallback build), wrapped in an ``extern "C"``
signature with the constants baked in. No header is included: half and bfloat16 are 16-bit structs converted with
the same PTX instructions ``cuda_fp16.h`` / ``cuda_bf16.h`` use (``cvt.f32.f16``, ``cvt.rn.f16.f32``,
``cvt.rn.bf16.f32``; bfloat16 -> float is a 16-bit shift), so both builds give the same bits and a variant
compiles without parsing any header. For a precompiled kernel MLX passes the input pointers, the output pointers,
then the scalars (the merge pass's split count); nothing else. The function name is the variant's name (MLX keys
loaded modules by it), and it carries a hash of the source, so an edited kernel never meets a stale binary.
Pure Python; imports no mlx.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pool.kernels.kernel_build import slab_input_names
from pool.kernels.paged_decode_cuda import (COMMON_HEADER, MERGE_SOURCE, THREADS, UNPACK, pass1_source)
from pool.kernels.slab_table import WRITE_BUCKETS
from pool.kernels.slab_table_cuda import update_params, update_source
from pool.kernels.table_gather_cuda import GATHER_SOURCE, gather_params
from pool.kernels.table_write_cuda import WRITE_SOURCE, write_params

PASSES = ("direct", "split", "merge", "table", "gather", "write")
DTYPES = {"bfloat16": "ssp_bf16", "float16": "ssp_f16"}

# 16-bit storage types and their conversions, without cuda_fp16.h / cuda_bf16.h (see the module docstring).
STANDALONE_PRELUDE = r"""
struct __align__(2) ssp_bf16 { unsigned short bits; };
struct __align__(2) ssp_f16 { unsigned short bits; };
__device__ __forceinline__ float ssp_to_float(ssp_bf16 x) { return __uint_as_float(((unsigned int)x.bits) << 16); }
__device__ __forceinline__ float ssp_to_float(ssp_f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
__device__ __forceinline__ void ssp_store(ssp_f16* p, float x) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  p->bits = h;
}
__device__ __forceinline__ void ssp_store(ssp_bf16* p, float x) {
#if __CUDA_ARCH__ >= 800
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  p->bits = h;
#else  // round to nearest even, NaN kept quiet (what cuda_bf16.h does below sm_80)
  unsigned int u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    p->bits = (unsigned short)((u >> 16) | 0x40u);
  } else {
    p->bits = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
#endif
}
"""


@dataclass(frozen=True)
class CudaVariant:
    """One compiled kernel. ``num_slabs``: the first pass's slab inputs (its bucket), 0 for the table route's first
    pass and for the merge pass; for ``table`` (the slab-table update, slab_table_cuda.py) the slabs it refreshes
    per launch (a ``WRITE_BUCKETS`` entry; its source does not depend on the dtype). ``gather`` and ``write``: the
    table gather (table_gather_cuda.py) and the table write (table_write_cuda.py), specialised on dtype, head_dim,
    n_kv and block size (their batch, token count and table length are runtime values)."""

    kind: str            # one of PASSES
    dtype: str           # "bfloat16" | "float16"
    head_dim: int
    group: int = 1       # query heads per KV head (pass 1 only)
    n_kv: int = 1
    block_size: int = 1
    unroll: int = 1
    num_slabs: int = 0

    def __post_init__(self) -> None:
        if self.kind not in PASSES:
            raise ValueError(f"unknown pass {self.kind!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype} has no standalone kernel ({', '.join(DTYPES)})")

    @property
    def label(self) -> str:
        if self.kind == "merge":
            return f"merge_{self.dtype}_d{self.head_dim}"
        if self.kind == "table":
            return f"table_w{self.num_slabs}"
        if self.kind in ("gather", "write"):
            return f"{self.kind}_{self.dtype}_d{self.head_dim}_kv{self.n_kv}_b{self.block_size}"
        return (f"{self.kind}_s{self.num_slabs}_{self.dtype}_d{self.head_dim}_g{self.group}_kv{self.n_kv}"
                f"_b{self.block_size}_u{self.unroll}")


@dataclass(frozen=True)
class KernelGeometry:
    """What a run fixes for every variant it will use (all but the pass and the slab bucket)."""

    dtype: str
    head_dim: int
    group: int
    n_kv: int
    block_size: int
    unroll: int

    def variants(self, bucket: int) -> list[CudaVariant]:
        """Every kernel a launch over ``bucket`` slab inputs may need: both first passes and the merge."""
        common = dict(dtype=self.dtype, head_dim=self.head_dim, group=self.group, n_kv=self.n_kv,
                      block_size=self.block_size, unroll=self.unroll, num_slabs=bucket)
        return [CudaVariant("direct", **common), CudaVariant("split", **common),
                CudaVariant("merge", self.dtype, self.head_dim)]

    def table_variants(self) -> list[CudaVariant]:
        """Every kernel of the table route, whatever the slab count: both first passes reading the slab table, the
        merge, the table update for each count of refreshed slabs, the table gather (prefill's history) and the table
        write (decode's tokens)."""
        return (self.variants(0) + [CudaVariant("table", self.dtype, 0, num_slabs=w) for w in WRITE_BUCKETS]
                + [CudaVariant(kind, self.dtype, self.head_dim, n_kv=self.n_kv, block_size=self.block_size)
                   for kind in ("gather", "write")])

    def launch_variants(self, num_slabs: int, table: bool) -> list[CudaVariant]:
        """What a launch over ``num_slabs`` slabs may need on the table route or the per-slab route."""
        from pool.kernels.plan import slab_bucket

        return self.table_variants() if table else self.variants(slab_bucket(num_slabs))


def _body(variant: CudaVariant) -> str:
    if variant.kind == "gather":
        return GATHER_SOURCE
    if variant.kind == "write":
        return WRITE_SOURCE
    if variant.kind == "table":
        return update_source(variant.num_slabs, precompiled=True)
    if variant.kind == "merge":
        return MERGE_SOURCE.replace("{num_splits}", "num_splits_arg")
    return pass1_source(variant.num_slabs, variant.kind == "direct")


def _params(variant: CudaVariant) -> list[str]:
    t = DTYPES[variant.dtype]
    if variant.kind == "gather":
        return gather_params(t)
    if variant.kind == "write":
        return write_params(t)
    if variant.kind == "table":
        return update_params(variant.num_slabs)
    if variant.kind == "merge":
        return ["const float* part_acc", "const float* part_ml", f"{t}* out", "int num_splits_arg"]
    params = [f"const {t}* queries", "const int* meta"]
    if variant.num_slabs:
        params += [f"const {t}* {name}" for name in slab_input_names(variant.num_slabs)]
    else:
        params.append("const unsigned long long* slab_table")
    if variant.kind == "direct":
        return params + [f"{t}* out"]
    return params + ["float* part_acc", "float* part_ml"]


def _constants(variant: CudaVariant) -> str:
    if variant.kind == "table":
        return ""
    values = [("HEAD_DIM", variant.head_dim)]
    if variant.kind in ("gather", "write"):
        values += [("N_KV", variant.n_kv), ("BLOCK_SIZE", variant.block_size)]
    elif variant.kind != "merge":
        values += [("GROUP", variant.group), ("N_KV", variant.n_kv), ("BLOCK_SIZE", variant.block_size),
                   ("UNROLL", variant.unroll)]
        if variant.num_slabs:  # the per-slab route; the table route has no slab-count constant
            values.append(("NUM_SLABS", variant.num_slabs))
    lines = [f"  using T = {DTYPES[variant.dtype]};"] + [f"  constexpr int {k} = {v};" for k, v in values]
    return "\n".join(lines)


def render(variant: CudaVariant, name: str = "KERNEL_NAME") -> str:
    """The translation unit of ``variant`` with its function called ``name``."""
    signature = ",\n    ".join(_params(variant))
    return (f"// slabscope paged decode: {variant.label} ({THREADS} threads per block)\n"
            + STANDALONE_PRELUDE + COMMON_HEADER + UNPACK
            + f'\nextern "C" __global__ void {name}(\n    {signature}) {{\n{_constants(variant)}\n'
            + _body(variant) + "\n}\n")


def kernel_name(variant: CudaVariant) -> str:
    """``ssp_pd_<label>_<hash of the source>``: unique per source, so MLX's per-name module cache and our disk
    cache never serve a binary of another source."""
    digest = hashlib.sha1(render(variant).encode()).hexdigest()[:10]
    return f"ssp_pd_{variant.label}_{digest}"


def source(variant: CudaVariant) -> tuple[str, str]:
    """(function name, translation unit) of ``variant``."""
    name = kernel_name(variant)
    return name, render(variant, name)
