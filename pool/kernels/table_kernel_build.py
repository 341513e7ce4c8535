"""What the table route's per-geometry CUDA kernels (the table gather, the table write) share: one NVRTC variant per
(dtype, head_dim, n_kv, block size), loaded without ever blocking a step on a build, and MLX's ``cuda_kernel`` JIT
when our builds are unavailable. Imports mlx inside functions only."""

from __future__ import annotations


class TableRouteKernel:
    """Base of ``CudaTableGather`` and ``CudaTableWrite``. Subclasses set ``KIND`` (the ``CudaVariant`` kind),
    ``SOURCE``, ``INPUT_NAMES`` and ``OUTPUT_NAMES``. ``builds``: the process's ``KernelBuilds`` (None: MLX's JIT).
    Owns the binaries it has looked up and its JIT kernel."""

    KIND = ""
    SOURCE = ""
    INPUT_NAMES: tuple[str, ...] = ()
    OUTPUT_NAMES: tuple[str, ...] = ()

    def __init__(self, builds=None):
        self.builds = builds
        self._binaries: dict[tuple, tuple[str, bytes]] = {}
        self._jit = None

    @classmethod
    def for_process(cls):
        from pool.kernels.cuda_builds import process_builds

        return cls(process_builds())

    @staticmethod
    def _key(storage) -> tuple:
        geometry = storage.geometry
        return geometry.dtype, geometry.head_dim, geometry.n_kv_heads, storage.block_size

    def _variant(self, key: tuple):
        from pool.kernels.cuda_variants import CudaVariant

        return CudaVariant(self.KIND, key[0], key[1], n_kv=key[2], block_size=key[3])

    def ready(self, storage) -> bool:
        """Whether a launch for ``storage``'s geometry can run now without waiting for a build: always with MLX's
        JIT (it compiles in the launch, as the decode kernel's fallback does); with our builds once the variant is
        loaded. Otherwise its build is queued first and the caller takes MLX's route meanwhile (never block a
        step on NVRTC: the decode kernel's readiness rule, cuda_builds.py)."""
        if self.builds is None:
            return True
        key = self._key(storage)
        if key in self._binaries:
            return True
        from pool.kernels.cuda_builds import URGENT

        variant = self._variant(key)
        if self.builds.status(variant) == "ready":
            self._binaries[key] = self.builds.binary(variant)
            return True
        self.builds.request([variant], URGENT)
        return False

    def _binary(self, dtype: str, head_dim: int, n_kv: int, block_size: int) -> tuple[str, bytes]:
        key = (dtype, head_dim, n_kv, block_size)
        found = self._binaries.get(key)
        if found is None:
            found = self._binaries[key] = self.builds.binary(self._variant(key))
        return found

    def _jit_kernel(self):
        import mlx.core as mx

        from pool.kernels.kernel_build import source_tag

        if self._jit is None:
            self._jit = mx.fast.cuda_kernel(
                name=f"ssp_table_{self.KIND}_{source_tag(self.SOURCE)}", input_names=list(self.INPUT_NAMES),
                output_names=list(self.OUTPUT_NAMES), source=self.SOURCE, ensure_row_contiguous=True)
        return self._jit


def table_route_kernels(backend: str, registry: dict, cuda_class):
    """(the backend's table kernel, an instance of its route kernel) or None: the kernel comes from ``registry``
    (tests register the CPU emulation for a pretend backend), else ``cuda_class()`` on CUDA (a function returning
    the class, imported only then); either needs the backend's table kernel (``paged_decode.table_kernel``)."""
    from pool.kernels.paged_decode import table_kernel

    table = table_kernel(backend)
    factory = registry.get(backend)
    if factory is None and backend == "cuda":
        factory = cuda_class()
    if table is None or factory is None:
        return None
    return table, factory.for_process()
