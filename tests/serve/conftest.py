"""The serving tests' set-up: OpenBLAS loaded before the first mlx import (the root conftest does it too; this keeps
the folder runnable on its own). The tiny models are the root conftest's fixtures (one cache per process,
tests/workloads/helpers.py)."""

from app.models.blas import enable_openblas

enable_openblas()
