"""The CUDA table write (pool/kernels/table_write.py has the design): one launch stores a decode step's new token
of every sequence, K and V, into the slabs in place, through the layer's slab table, and hands the table on.

Thread ``i`` copies table entry ``i`` (when ``i`` < the table's length) into the output table, and stores 16-byte
chunk ``i`` of the tokens (when ``i`` < B x N_KV x chunks per head row): sequence ``b``, head ``h``, chunk ``c``
go to row ``meta[3 + b]``'s position ``meta[3 + B + b]`` in slab ``row / slab_blocks`` at row
``row % slab_blocks`` (the pool's own mapping; ``meta[:3]`` = slab_blocks, B, the table's length: runtime values,
so one variant per geometry serves every batch and table size). The decode kernel takes the output
table as its input, so MLX runs the write first; the slabs are not inputs (that is the point: two inputs at any
slab count), so the write changes their buffers behind MLX's back, which table_write.py says when that is safe.
Both builds (NVRTC variant, MLX's ``cuda_kernel`` JIT) compile this body. Imports mlx inside functions only.
"""

from __future__ import annotations

from pool.kernels.table_kernel_build import TableRouteKernel

WRITE_THREADS = 256

WRITE_SOURCE = r"""
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  constexpr int VEC = (HEAD_DIM * (int)sizeof(T)) % 16 == 0 ? 16 / (int)sizeof(T) : 1;
  constexpr int CHUNKS = HEAD_DIM / VEC;
  const int slab_blocks = meta[0];
  const int batch = meta[1];
  const int table_len = meta[2];
  if (i < (long long)table_len) {
    table[i] = old_table[i];
  }
  if (i >= (long long)batch * N_KV * CHUNKS) {
    return;
  }
  const int c = (int)(i % CHUNKS);
  const int h = (int)((i / CHUNKS) % N_KV);
  const int b = (int)(i / ((long long)CHUNKS * N_KV));
  const int row = meta[3 + b];
  const int position = meta[3 + batch + b];
  const int slab = row / slab_blocks;
  const int local = row - slab * slab_blocks;
  const long long dst = (((long long)local * N_KV + h) * BLOCK_SIZE + position) * HEAD_DIM + c * VEC;
  const long long src = ((long long)b * N_KV + h) * HEAD_DIM + c * VEC;
  T* k_slab = reinterpret_cast<T*>(old_table[2 * slab]);
  T* v_slab = reinterpret_cast<T*>(old_table[2 * slab + 1]);
  if (VEC == 1) {
    k_slab[dst] = keys[src];
    v_slab[dst] = values[src];
  } else {
    *reinterpret_cast<uint4*>(k_slab + dst) = *reinterpret_cast<const uint4*>(keys + src);
    *reinterpret_cast<uint4*>(v_slab + dst) = *reinterpret_cast<const uint4*>(values + src);
  }
"""

WRITE_DTYPES = ("bfloat16", "float16")


def write_params(t: str) -> list[str]:
    """The standalone (NVRTC) write kernel's parameters: inputs, then the output table (no scalars)."""
    return ["const int* meta", "const unsigned long long* old_table", f"const {t}* keys", f"const {t}* values",
            "unsigned long long* table"]


def write_grid(table_len: int, batch: int, n_kv: int, head_dim: int, itemsize: int):
    """(grid in threads, threads per block): one thread per table entry or 16-byte token chunk, the larger."""
    vec = 16 // itemsize if (head_dim * itemsize) % 16 == 0 else 1
    total = max(table_len, batch * n_kv * (head_dim // vec))
    threads = max(1, min(WRITE_THREADS, total))
    return (-(-total // threads) * threads, 1, 1), threads


class CudaTableWrite(TableRouteKernel):
    """``table_write.WriteKernel`` on CUDA (builds, readiness, JIT: ``TableRouteKernel``)."""

    KIND = "write"
    SOURCE = WRITE_SOURCE
    INPUT_NAMES = ("meta", "old_table", "keys", "values")
    OUTPUT_NAMES = ("table",)

    @staticmethod
    def supports(dtype: str) -> bool:
        return dtype in WRITE_DTYPES

    def __call__(self, storage, layer: int, table, meta, keys, values):
        """The table after storing ``keys``/``values`` ([B, n_kv, head_dim]) where ``meta`` says (through
        ``table``); mutates the slabs' buffers when MLX runs it."""
        import mlx.core as mx

        batch, n_kv, head_dim = keys.shape
        table_len = int(table.shape[0])
        grid, threads = write_grid(table_len, batch, n_kv, head_dim, keys.dtype.size)
        inputs = [meta, table, keys, values]
        if self.builds is None:
            (out,) = self._jit_kernel()(
                inputs=inputs, template=[("T", keys.dtype), ("HEAD_DIM", head_dim), ("N_KV", n_kv),
                                         ("BLOCK_SIZE", storage.block_size)],
                grid=grid, threadgroup=(threads, 1, 1), output_shapes=[(table_len,)], output_dtypes=[mx.uint64])
            return out
        name, binary = self._binary(str(keys.dtype).rsplit(".", 1)[-1], head_dim, n_kv, storage.block_size)
        (out,) = mx.fast.precompiled_cuda_kernel(
            name=name, compiled_source=binary, inputs=inputs, output_shapes=[(table_len,)],
            output_dtypes=[mx.uint64], scalars=[], grid=grid, threadgroup=(threads, 1, 1),
            ensure_row_contiguous=True)
        return out
