"""``bench host`` with the CUDA fused route's host side emulated on a CPU: the decode step the H200 builds.

On a CPU the decision rule says gather (no GPU backend), so ``slabscope bench host`` there times the gather route,
whose per-sequence gathers a GPU decode step never builds. This process runs the same bench after making the fused
route's host side run on the CPU: the backend reported as CUDA, a kernel registered for the model's dtype and
head_dim, kernel builds from a fake compiler (``KernelBuilds``: readiness and binaries, no NVRTC) and MLX's
``precompiled_cuda_kernel`` replaced by zero-filled outputs of the launch's shapes. Every Python step of the route
runs as on the GPU (decisions, token writes, launch plans, ``paged_decode_cuda``'s checks and arguments); the
kernels do not, so outputs are meaningless and only the ``build`` column means what it means on the GPU. A figure
from here is an emulation and must say so. Patches this process's modules; run it as its own process.

    python -m app.bench.host_emulation --slab-blocks 8 --scenario distinct_burst --set n=8 \\
        --set prompt_tokens=1024 --set gen_tokens=32 --model synthetic:tiny-qwen3-28l --dtype float32 \\
        --device cpu --engines slab,dense

``--slab-blocks`` sets the paged engines' rows per slab (default the spec's), so a short CPU prompt reaches the
H200 run's slab count per layer (n=8 x 4128 tokens in 32-block slabs: 33 slabs).
"""

from __future__ import annotations

import sys
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


def main(argv: list[str]) -> int:
    """``--slab-blocks N`` (optional, first), then ``slabscope bench host`` arguments."""
    if argv[:1] == ["--slab-blocks"]:
        import app.workloads.spec as spec

        spec.DEFAULT_SLAB_BLOCKS = int(argv[1])
        argv = argv[2:]
    from app.cli import build_parser
    from app.models import load_model

    args = build_parser().parse_args(["bench", "host", *argv])
    loaded = load_model(args.model, dtype=args.dtype, device=args.device, seed=args.seed)
    install(loaded.dtype, loaded.head_dim)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
