"""Which BLAS MLX's CPU backend uses, and making it OpenBLAS on Linux.

MLX's Linux CPU wheel links a bundled *reference* BLAS (~8 GFLOP/s fp32 on this class of machine). Debian's
OpenBLAS, loaded with ``RTLD_GLOBAL`` before the first ``import mlx.core``, interposes its ``sgemm``/``cblas_*``
symbols and runs the same matmuls faster (16x for a 1024^3 fp32 matmul on one thread: ``slabscope bench
blas``). The interposition only works if it happens before mlx's shared
library is loaded, so this module must never import mlx at import time, and ``enable_openblas`` refuses (and
says so) once mlx is in ``sys.modules``.

``SLABSCOPE_BLAS=reference`` keeps MLX's bundled reference BLAS (nothing is loaded): the numerics tests run under
it as well as under OpenBLAS's kernels (docs/testing.md, "Numerics"). Any other value than ``openblas`` (the
default) or ``reference`` is refused.

Thread count: OpenBLAS reads ``OPENBLAS_NUM_THREADS`` when it is loaded. Two workers side by side on two cores
should each set it to 1 *before* calling ``enable_openblas``.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

from app.models.mlx_env import apply_mlx_defaults

OPENBLAS_PATH = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"
BLAS_ENV = "SLABSCOPE_BLAS"  # "openblas" (default) or "reference"
BLAS_CHOICES = ("openblas", "reference")

# Module state: the handle we loaded (kept alive so the library is never unloaded) and the line describing it.
_openblas_handle: ctypes.CDLL | None = None
_blas_line: str | None = None

_PARALLEL_NAMES = {0: "sequential", 1: "pthread", 2: "openmp"}


def _openblas_description(lib: ctypes.CDLL, path: str) -> str:
    """One line naming the OpenBLAS build behind ``lib`` (version, threading model, thread count)."""
    version = "OpenBLAS"
    try:
        lib.openblas_get_config.restype = ctypes.c_char_p
        config = lib.openblas_get_config().decode(errors="replace").split()
        # config looks like "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Cooperlake MAX_THREADS=64"
        version = " ".join(config[:2]) if len(config) >= 2 else version
        core = config[-2] if len(config) >= 4 else ""
    except AttributeError:  # a libblas.so.3 that is not OpenBLAS
        return f"BLAS: {path} (not OpenBLAS: no openblas_get_config)"
    parallel = _PARALLEL_NAMES.get(int(lib.openblas_get_parallel()), "unknown")
    threads = int(lib.openblas_get_num_threads())
    core_part = f", core {core}" if core else ""
    return f"BLAS: {version} {parallel} ({path}{core_part}), {threads} thread{'s' if threads != 1 else ''}"


def _mlx_imported() -> bool:
    return "mlx.core" in sys.modules or "mlx" in sys.modules


def enable_openblas(path: str = OPENBLAS_PATH) -> str:
    """Load OpenBLAS globally (Linux, before mlx) and return one line describing the BLAS MLX will use; with
    ``SLABSCOPE_BLAS=reference`` load nothing (ValueError for a value that is neither choice).

    Idempotent: a second call returns the same line. Mutates process state by dlopen-ing ``path`` once and by
    setting slabscope's MLX environment defaults (``mlx_env.py``: they too must precede mlx's start). Never
    imports mlx.
    """
    global _openblas_handle, _blas_line
    apply_mlx_defaults()
    if _blas_line is not None:
        return _blas_line
    choice = os.environ.get(BLAS_ENV, "openblas")
    if choice not in BLAS_CHOICES:
        raise ValueError(f"{BLAS_ENV}={choice!r}: expected one of {', '.join(BLAS_CHOICES)}")
    if choice == "reference" and sys.platform.startswith("linux"):
        _blas_line = f"BLAS: MLX bundled reference BLAS ({BLAS_ENV}=reference)"
        return _blas_line
    if sys.platform == "darwin":
        _blas_line = "BLAS: Apple Accelerate (macOS; model matmuls run on Metal when the GPU is used)"
        return _blas_line
    if not sys.platform.startswith("linux"):
        return f"BLAS: unknown ({sys.platform})"
    if not os.path.exists(path):
        line = f"BLAS: MLX bundled reference BLAS (OpenBLAS not found at {path})"
        if not _mlx_imported():
            _blas_line = line  # final: nothing later can change it
        return line
    if _mlx_imported():
        # Too late to interpose; do not pretend. Not cached: the caller may be a different process later.
        return ("BLAS: MLX bundled reference BLAS (mlx.core was imported before enable_openblas(); "
                "OpenBLAS not loaded)")
    _openblas_handle = ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
    _blas_line = _openblas_description(_openblas_handle, path)
    return _blas_line


def blas_line() -> str:
    """The BLAS line for this process without loading anything (what ``enable_openblas`` found, or a fallback)."""
    if _blas_line is not None:
        return _blas_line
    if sys.platform == "darwin":
        return "BLAS: Apple Accelerate (macOS)"
    return "BLAS: MLX bundled reference BLAS (enable_openblas() not called)"


def describe_device_blas() -> str:
    """The BLAS line, qualified by the MLX default device (imports mlx: call after ``enable_openblas``)."""
    import mlx.core as mx

    device = mx.default_device()
    if device.type == mx.DeviceType.gpu:
        backend = "Metal" if mx.metal.is_available() else "CUDA"
        return f"BLAS: n/a ({backend} device; CPU side: {blas_line().removeprefix('BLAS: ')})"
    return blas_line()


def measure_matmul_gflops(n: int = 1024, repeats: int = 5, dtype: str = "float32") -> float:
    """Best-of-``repeats`` GFLOP/s of an ``n x n`` matmul on the CPU stream (imports mlx; allocates 3 n^2 arrays)."""
    import mlx.core as mx

    mx_dtype = getattr(mx, dtype)
    key_a, key_b = mx.random.split(mx.random.key(0))
    a = mx.random.normal((n, n), key=key_a).astype(mx_dtype)
    b = mx.random.normal((n, n), key=key_b).astype(mx_dtype)
    mx.eval(a, b)
    with mx.stream(mx.cpu):
        mx.eval(a @ b)  # warm-up: first call pays for thread start-up and kernel selection
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            mx.eval(a @ b)
            best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best / 1e9


def main() -> int:
    """``python -m app.models.blas``: print the BLAS line and a measured fp32/bf16 matmul rate."""
    print(enable_openblas())
    print(f"fp32 matmul 1024^3: {measure_matmul_gflops():.1f} GFLOP/s")
    print(f"bf16 matmul 512^3: {measure_matmul_gflops(512, 3, 'bfloat16'):.1f} GFLOP/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
