"""``slabscope bench host --emulate-cuda``: the CUDA fused route's host side, run on a CPU.

On a CPU the decision rule says gather (no GPU backend), so ``bench host`` there times the gather route, whose
per-sequence gathers a GPU decode step never builds. ``install`` makes the fused route's host side run here: the
backend reported as CUDA, a kernel registered for the model's dtype and head_dim, kernel builds from a fake
compiler (``KernelBuilds``: readiness and binaries, no NVRTC) and MLX's ``precompiled_cuda_kernel`` replaced by
zero-filled outputs of the launch's shapes. Every Python step of the route runs as on the GPU (decisions, token
writes, launch plans, ``paged_decode_cuda``'s checks and arguments); the kernels and MLX's own launch cost do not,
so outputs are meaningless and only the ``build`` columns mean what they mean on a GPU. A figure from it is an
emulation and says so. It patches modules for the rest of the process: the command's process, nothing else.

    slabscope bench host --emulate-cuda --slab-blocks 8 --scenario distinct_burst --set n=8 \\
        --set prompt_tokens=1024 --set gen_tokens=32 --model synthetic:tiny-qwen3-28l --dtype float32 \\
        --device cpu --engines slab,dense

(``--slab-blocks 8`` lets a 1024-token CPU prompt reach the H200 burst's slab count per layer: its 8 x 4128 tokens in
slabs of 32 blocks of 32 tokens fill 33 slabs.)
"""

from __future__ import annotations

import tempfile


def install(dtype: str, head_dim: int) -> None:
    """Make this process's fused route take CUDA's path with ``dtype``/``head_dim`` (see the module docstring)."""
    import mlx.core as mx

    import pool.fused_decision as decision
    import pool.kernels as kernels
    import pool.kernels.cuda_builds as builds_module
    import pool.kernels.cuda_variants as variants
    import pool.kernels.plan as plan
    from pool.kernels.kernel_cache import KernelCache
    from pool.kernels.nvrtc import CompileResult

    decision.detect_backend = lambda: "cuda"
    plan.SUPPORTED_DTYPES = plan.SUPPORTED_DTYPES | {dtype}
    plan.SUPPORTED_HEAD_DIMS = plan.SUPPORTED_HEAD_DIMS | {head_dim}
    variants.DTYPES = {"float32": "float", **variants.DTYPES}
    import pool.kernels.table_gather_cuda as gather_cuda
    import pool.kernels.table_write_cuda as write_cuda

    gather_cuda.GATHER_DTYPES = (*gather_cuda.GATHER_DTYPES, dtype)  # the table gather and write launch too
    write_cuda.WRITE_DTYPES = (*write_cuda.WRITE_DTYPES, dtype)
    fake = lambda source, sm: CompileResult(b"emulated", "cubin", f"sm_{sm}", 0.0)  # noqa: E731
    builds = builds_module.KernelBuilds(90, cache=KernelCache(tempfile.mkdtemp(prefix="slabscope-emulated-")),
                                        compiler=fake)
    builds_module.process_builds = lambda environ=None: builds
    builds_module.fallback_reason = lambda environ=None: None

    def register(environ=None, thresholds=None) -> list[str]:
        decision.register_kernel(decision.KernelCaps(backend="cuda", dtypes=frozenset({dtype}),
                                                     head_dims=frozenset({head_dim}), multi_slab=True))
        return ["cuda"]

    def launch(*, output_shapes, output_dtypes, **_):
        return [mx.zeros(shape, dtype=dtype_) for shape, dtype_ in zip(output_shapes, output_dtypes)]

    kernels.register_kernels = register
    mx.fast.precompiled_cuda_kernel = launch
