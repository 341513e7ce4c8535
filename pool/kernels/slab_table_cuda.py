"""The CUDA side of the slab-table route (pool/kernels/slab_table.py has the design): the table-update kernel that
stores slab addresses, its writer, and the decode launch that reads slabs through the table.

The update kernel takes the previous table, the indices of the W slabs to refresh and those slabs' K and V tensors
as inputs (W a ``WRITE_BUCKETS`` entry: one variant per W, whatever the pool's slab count) and writes a table of
``capacity`` slabs: entry ``2 s`` (K) and ``2 s + 1`` (V) of a refreshed slab s gets its input's device address,
every other entry is copied (or zero past the old table). One thread per entry, no shared memory, no race: each
thread compares its slab with the W indices. Because the slabs are inputs, MLX runs it after this step's writes
into them (and keeps their buffers alive until it has run); because the table is an input of the decode kernel,
the decode runs after it. The decode launch (``CudaTableLaunch``) passes ``queries``, the plan's ``meta`` and the
table: three inputs at any slab count, one first-pass variant per geometry. Imports mlx inside functions only.
"""

from __future__ import annotations

from typing import Sequence

UPDATE_THREADS = 256

UPDATE_SOURCE = r"""
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)new_len_arg) {
    return;
  }
  const int slab = (int)(i >> 1);
  const bool is_v = (i & 1) != 0;
  unsigned long long entry = i < (long long)old_len_arg ? old_table[i] : 0ull;
{matches}
  table[i] = entry;
"""


def update_source(writes: int, precompiled: bool) -> str:
    """The update kernel's body for ``writes`` refreshed slabs. The precompiled build gets the two lengths as int
    scalars; MLX's ``cuda_kernel`` JIT (which takes no scalars) as template constants OLD_LEN / NEW_LEN."""
    matches = "\n".join(
        f"  if (slots[{w}] == slab) {{ entry = is_v ? (unsigned long long)(v{w}) : (unsigned long long)(k{w}); }}"
        for w in range(writes))
    body = UPDATE_SOURCE.replace("{matches}", matches)
    if precompiled:
        return body
    return "  const int old_len_arg = OLD_LEN;\n  const int new_len_arg = NEW_LEN;\n" + body


def update_params(writes: int) -> list[str]:
    """The standalone (NVRTC) update kernel's parameters: inputs, the output, then the scalars."""
    return (["const unsigned long long* old_table", "const int* slots"]
            + [f"const void* k{w}" for w in range(writes)] + [f"const void* v{w}" for w in range(writes)]
            + ["unsigned long long* table", "int old_len_arg", "int new_len_arg"])


class CudaTableWriter:
    """Makes and refreshes tables with the update kernel (``slab_table.TableWriter``). ``builds``: the process's
    ``KernelBuilds`` (None: MLX's cuda_kernel JIT). ``geometry``: the run's dtype picks no code, only the variant
    record the builds cache under."""

    def __init__(self, builds, dtype: str):
        self.builds = builds
        self.dtype = dtype
        self._empty = None
        self._jit: dict[int, object] = {}
        self._binaries: dict[int, tuple[str, bytes]] = {}  # per width: asked at every layer of every step

    def _no_table(self):
        import mlx.core as mx

        if self._empty is None:
            self._empty = mx.zeros((2,), dtype=mx.uint64)
            mx.eval(self._empty)
        return self._empty

    def update(self, table, slots: Sequence[int], slots_array, keys: Sequence, values: Sequence, capacity: int):
        import mlx.core as mx

        writes = len(slots)
        old = self._no_table() if table is None else table
        old_len = 0 if table is None else int(table.shape[0])
        new_len = 2 * capacity
        inputs = [old, slots_array, *keys, *values]
        threads = min(UPDATE_THREADS, new_len)
        grid = (-(-new_len // threads) * threads, 1, 1)
        if self.builds is None:
            (out,) = self._jit_kernel(writes)(
                inputs=inputs, template=[("OLD_LEN", old_len), ("NEW_LEN", new_len)], grid=grid,
                threadgroup=(threads, 1, 1), output_shapes=[(new_len,)], output_dtypes=[mx.uint64])
            return out
        found = self._binaries.get(writes)
        if found is None:
            from pool.kernels.cuda_variants import CudaVariant

            found = self._binaries[writes] = self.builds.binary(CudaVariant("table", self.dtype, 0, num_slabs=writes))
        name, binary = found
        (out,) = mx.fast.precompiled_cuda_kernel(name=name, compiled_source=binary, inputs=inputs,
                                                 output_shapes=[(new_len,)], output_dtypes=[mx.uint64],
                                                 scalars=[old_len, new_len], grid=grid, threadgroup=(threads, 1, 1),
                                                 ensure_row_contiguous=True)
        return out

    def _jit_kernel(self, writes: int):
        import mlx.core as mx

        from pool.kernels.kernel_build import source_tag

        kernel = self._jit.get(writes)
        if kernel is None:
            source = update_source(writes, precompiled=False)
            kernel = self._jit[writes] = mx.fast.cuda_kernel(
                name=f"ssp_slab_table_w{writes}_{source_tag(source)}",
                input_names=["old_table", "slots", *[f"k{w}" for w in range(writes)],
                             *[f"v{w}" for w in range(writes)]],
                output_names=["table"], source=source, ensure_row_contiguous=True)
        return kernel


TABLE_MAX_SLABS = 1 << 24   # the table route's slab limit (rows stay int32 in the plan: its own check)


class CudaTableLaunch:
    """One plan's decode launch on the table route, prepared at a step's first layer and reused by every layer it
    fits (like ``paged_decode_cuda.CudaLaunch``: checks, binaries, grid and output shapes once per step). A launch
    passes ``queries``, ``meta`` and the layer's slab table: its inputs do not depend on the slab count. Reads the
    slabs only for its checks (O(1): the first and last); mutates nothing."""

    def __init__(self, queries, k_slabs: Sequence, v_slabs: Sequence, plan, *, meta=None, builds=None):
        import mlx.core as mx

        from pool.kernels.paged_decode_cuda import THREADS, _dtype_name, check_inputs, output_layout, unroll_for

        n_q, n_kv, head_dim, block_size = check_inputs(queries, k_slabs, v_slabs, plan, max_slabs=TABLE_MAX_SLABS)
        self.plan, self.num_slabs = plan, len(k_slabs)
        self.slab_shape, self.dtype, self.query_shape = tuple(k_slabs[0].shape), queries.dtype, tuple(queries.shape)
        self.meta = mx.array(plan.meta) if meta is None else meta
        self.grid = (THREADS * plan.num_splits, n_kv, plan.batch)
        self.threads = THREADS
        self.direct, self.out_shapes, self.out_dtypes = output_layout(plan, queries, n_q, head_dim)
        self.merge_grid, self.head_dim = (head_dim, n_q, plan.batch), head_dim
        unroll = unroll_for(block_size, head_dim, plan.tuning.unroll)
        self.builds = builds
        self.template = [("T", queries.dtype), ("HEAD_DIM", head_dim), ("GROUP", n_q // n_kv), ("N_KV", n_kv),
                         ("BLOCK_SIZE", block_size), ("UNROLL", unroll)]
        if builds is not None:
            from pool.kernels.paged_decode_cuda import launch_binaries

            self.first, self.merge = launch_binaries(builds, _dtype_name(queries.dtype), head_dim, n_q, n_kv,
                                                     block_size, 0, self.direct, unroll)

    def fits(self, queries, k_slabs: Sequence, v_slabs: Sequence) -> bool:
        """The plan's slab count, the same slab shape and dtype, the same query shape (O(1))."""
        if len(k_slabs) != self.num_slabs or len(v_slabs) != self.num_slabs:
            return False
        k0, v0 = k_slabs[0], v_slabs[0]
        return (tuple(queries.shape) == self.query_shape and queries.dtype == self.dtype
                and k0.dtype == self.dtype and v0.dtype == self.dtype
                and tuple(k0.shape) == self.slab_shape and tuple(v0.shape) == self.slab_shape)

    def __call__(self, queries, table):
        """Launch on one layer's refreshed table; returns the attention output shaped like ``queries``."""
        import mlx.core as mx

        from pool.kernels.paged_decode_cuda import merge_kernel, table_pass1_kernel

        inputs = [queries, self.meta, table]
        merge_out = [self.query_shape]
        if self.builds is None:
            outs = table_pass1_kernel(self.direct)(inputs=inputs, template=self.template, grid=self.grid,
                                                   threadgroup=(self.threads, 1, 1), output_shapes=self.out_shapes,
                                                   output_dtypes=self.out_dtypes)
            if self.direct:
                return outs[0]
            (out,) = merge_kernel()(
                inputs=list(outs), template=[("T", queries.dtype), ("HEAD_DIM", self.head_dim)],
                grid=self.merge_grid, threadgroup=(self.head_dim, 1, 1), output_shapes=merge_out,
                output_dtypes=[queries.dtype])
            return out
        outs = mx.fast.precompiled_cuda_kernel(name=self.first[0], compiled_source=self.first[1], inputs=inputs,
                                               output_shapes=self.out_shapes, output_dtypes=self.out_dtypes,
                                               scalars=[], grid=self.grid, threadgroup=(self.threads, 1, 1),
                                               ensure_row_contiguous=True)
        if self.direct:
            return outs[0]
        (out,) = mx.fast.precompiled_cuda_kernel(name=self.merge[0], compiled_source=self.merge[1],
                                                 inputs=list(outs), output_shapes=merge_out,
                                                 output_dtypes=[queries.dtype], scalars=[self.plan.num_splits],
                                                 grid=self.merge_grid, threadgroup=(self.head_dim, 1, 1),
                                                 ensure_row_contiguous=True)
        return out


class CudaTableKernel:
    """The table route of the CUDA kernel as ``paged_decode.fused_decode`` calls it: the storage's tables (made by
    ``CudaTableWriter``) and the step's prepared launch."""

    name = "cuda-slab-table"

    @staticmethod
    def writer(dtype: str) -> CudaTableWriter:
        from pool.kernels.cuda_builds import process_builds

        return CudaTableWriter(process_builds(), dtype)

    @staticmethod
    def prepare(queries, k_slabs, v_slabs, plan, meta):
        from pool.kernels.cuda_builds import process_builds

        return CudaTableLaunch(queries, k_slabs, v_slabs, plan, meta=meta, builds=process_builds())
