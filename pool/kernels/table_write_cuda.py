"""The CUDA table write (pool/kernels/table_write.py has the design): one launch stores a step's new tokens of
every sequence (a decode step's one, or a prefill chunk's), K and V, into the slabs in place, through the layer's
slab table, and hands the table on.

Thread ``i`` copies table entry ``i`` (when ``i`` < the table's length) into the output table, and stores 16-byte
chunk ``i`` of the tokens (when ``i`` < B x tokens x N_KV x chunks per head row): sequence ``b``, token ``t``, head
``h``, chunk ``c`` (from ``keys[b, t, h]``, token-major like the pool's write API) go to block position ``p = meta[5
+ b] + t`` of the sequence's rows: row ``meta[5 + B + b * seq_blocks + p / BLOCK_SIZE]`` at position ``p %
BLOCK_SIZE``, in slab ``row / slab_blocks`` at row ``row % slab_blocks`` (the pool's own mapping). ``meta[:5]`` =
slab_blocks, B, the table's length, tokens per sequence, rows per sequence: runtime values, so one variant per
geometry serves every batch, chunk and table size. A reader of the slabs in the same step takes the output table
as its input (the decode kernel, the table gather), so MLX runs the write first; the slabs are not inputs (that is
the point: a few inputs at any slab count), so the write changes their buffers behind MLX's back, which
table_write.py says when that is safe. Both builds (NVRTC variant, MLX's ``cuda_kernel`` JIT) compile this body.
Imports mlx inside functions only.
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
  const int tokens = meta[3];
  const int seq_blocks = meta[4];
  if (i < (long long)table_len) {
    table[i] = old_table[i];
  }
  if (i >= (long long)batch * tokens * N_KV * CHUNKS) {
    return;
  }
  const int c = (int)(i % CHUNKS);
  long long rest = i / CHUNKS;
  const int h = (int)(rest % N_KV);
  rest /= N_KV;
  const int t = (int)(rest % tokens);
  const int b = (int)(rest / tokens);
  const int p = meta[5 + b] + t;
  const int row = meta[5 + batch + b * seq_blocks + p / BLOCK_SIZE];
  const int position = p % BLOCK_SIZE;
  const int slab = row / slab_blocks;
  const int local = row - slab * slab_blocks;
  const long long dst = (((long long)local * N_KV + h) * BLOCK_SIZE + position) * HEAD_DIM + c * VEC;
  const long long src = (((long long)b * tokens + t) * N_KV + h) * HEAD_DIM + c * VEC;
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


def write_grid(table_len: int, batch: int, n_kv: int, head_dim: int, itemsize: int, tokens: int = 1):
    """(grid in threads, threads per block): one thread per table entry or 16-byte token chunk, the larger."""
    vec = 16 // itemsize if (head_dim * itemsize) % 16 == 0 else 1
    total = max(table_len, batch * tokens * n_kv * (head_dim // vec))
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
        """The table after storing ``keys``/``values`` ([B, tokens, n_kv, head_dim]) where ``meta`` says
        (through ``table``); mutates the slabs' buffers when MLX runs it."""
        import mlx.core as mx

        batch, tokens, n_kv, head_dim = keys.shape
        table_len = int(table.shape[0])
        grid, threads = write_grid(table_len, batch, n_kv, head_dim, keys.dtype.size, tokens)
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
