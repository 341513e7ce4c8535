"""Suite-wide setup: load OpenBLAS before anything imports mlx (fp32 matmul is ~30x faster with it on CPU)."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

try:
    from app.models.blas import enable_openblas
except ImportError:  # models package not importable: tests still run on MLX's reference BLAS
    enable_openblas = None

if enable_openblas is not None:
    enable_openblas()
