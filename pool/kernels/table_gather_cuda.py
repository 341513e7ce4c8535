"""The CUDA table gather (pool/kernels/table_gather.py has the design): one launch copies the visible K and V of one
or more sequences out of any number of slabs, reading slab addresses from the layer's slab table.

One thread per 16 bytes of output (8 bf16/f16 elements; one element when a head row is not a multiple of 16
bytes), K and V both: thread ``i`` owns sequence ``b``, head ``h``, token ``t`` and 16-byte chunk ``c`` of the
outputs ``[batch, N_KV, n, HEAD_DIM]`` (the layout attention takes: a batched prefill chunk's histories in one
launch, no copy to a batch layout after it). Its source token ``lo + t`` sits in block ``(lo + t) /
BLOCK_SIZE`` of sequence ``b``'s rows (``meta[5 + b * seq_blocks + block]``, a physical row), which lives in slab
``row / slab_blocks`` at row ``row % slab_blocks``: the pool's own ``_slab_for_row`` mapping. Inputs: ``meta``
(``[lo, n, slab_blocks, batch, seq_blocks, rows...]``, int32) and the table (uint64, entry ``2 s`` K
and ``2 s + 1`` V of slab ``s``): two inputs at any slab count. Both builds (NVRTC variant, MLX's ``cuda_kernel``
JIT) compile this body. Imports mlx inside functions only.
"""

from __future__ import annotations

from pool.kernels.table_kernel_build import TableRouteKernel

GATHER_THREADS = 256

GATHER_SOURCE = r"""
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  constexpr int VEC = (HEAD_DIM * (int)sizeof(T)) % 16 == 0 ? 16 / (int)sizeof(T) : 1;
  constexpr int CHUNKS = HEAD_DIM / VEC;
  const int lo = meta[0];
  const int n = meta[1];
  const int slab_blocks = meta[2];
  const int batch = meta[3];
  const int seq_blocks = meta[4];
  if (i >= (long long)batch * N_KV * n * CHUNKS) {
    return;
  }
  const int c = (int)(i % CHUNKS);
  long long rest = i / CHUNKS;
  const int t = (int)(rest % n);
  rest /= n;
  const int h = (int)(rest % N_KV);
  const int b = (int)(rest / N_KV);
  const int token = lo + t;
  const int row = meta[5 + b * seq_blocks + token / BLOCK_SIZE];
  const int slab = row / slab_blocks;
  const int local = row - slab * slab_blocks;
  const long long src = (((long long)local * N_KV + h) * BLOCK_SIZE + token % BLOCK_SIZE) * HEAD_DIM + c * VEC;
  const long long dst = (((long long)b * N_KV + h) * n + t) * HEAD_DIM + c * VEC;
  const T* k_slab = reinterpret_cast<const T*>(slab_table[2 * slab]);
  const T* v_slab = reinterpret_cast<const T*>(slab_table[2 * slab + 1]);
  if (VEC == 1) {
    keys[dst] = k_slab[src];
    values[dst] = v_slab[src];
  } else {
    *reinterpret_cast<uint4*>(keys + dst) = *reinterpret_cast<const uint4*>(k_slab + src);
    *reinterpret_cast<uint4*>(values + dst) = *reinterpret_cast<const uint4*>(v_slab + src);
  }
"""

GATHER_DTYPES = ("bfloat16", "float16")


def gather_params(t: str) -> list[str]:
    """The standalone (NVRTC) gather kernel's parameters: inputs, then outputs (no scalars)."""
    return ["const int* meta", "const unsigned long long* slab_table", f"{t}* keys", f"{t}* values"]


def gather_grid(n_kv: int, tokens: int, head_dim: int, itemsize: int,
                batch: int = 1) -> tuple[tuple[int, int, int], int]:
    """(grid in threads, threads per block) of a gather of ``tokens`` tokens of ``batch`` sequences: one thread per
    16-byte chunk."""
    vec = 16 // itemsize if (head_dim * itemsize) % 16 == 0 else 1
    total = batch * n_kv * tokens * (head_dim // vec)
    threads = max(1, min(GATHER_THREADS, total))
    return (-(-total // threads) * threads, 1, 1), threads


class CudaTableGather(TableRouteKernel):
    """``table_gather.GatherKernel`` on CUDA (builds, readiness, JIT: ``TableRouteKernel``)."""

    KIND = "gather"
    SOURCE = GATHER_SOURCE
    INPUT_NAMES = ("meta", "slab_table")
    OUTPUT_NAMES = ("keys", "values")

    @staticmethod
    def supports(dtype: str) -> bool:
        return dtype in GATHER_DTYPES

    def __call__(self, table, meta, *, tokens: int, n_kv: int, head_dim: int, block_size: int, dtype,
                 batch: int = 1):
        """K and V ([batch, n_kv, tokens, head_dim]) of the rows ``meta`` names, read through ``table``."""
        import mlx.core as mx

        grid, threads = gather_grid(n_kv, tokens, head_dim, dtype.size, batch)
        shapes = [(batch, n_kv, tokens, head_dim)] * 2
        if self.builds is None:
            keys, values = self._jit_kernel()(
                inputs=[meta, table], template=[("T", dtype), ("HEAD_DIM", head_dim), ("N_KV", n_kv),
                                                ("BLOCK_SIZE", block_size)],
                grid=grid, threadgroup=(threads, 1, 1), output_shapes=shapes, output_dtypes=[dtype, dtype])
            return keys, values
        name, binary = self._binary(str(dtype).rsplit(".", 1)[-1], head_dim, n_kv, block_size)
        keys, values = mx.fast.precompiled_cuda_kernel(
            name=name, compiled_source=binary, inputs=[meta, table], output_shapes=shapes,
            output_dtypes=[dtype, dtype], scalars=[], grid=grid, threadgroup=(threads, 1, 1),
            ensure_row_contiguous=True)
        return keys, values
