"""Fixtures for the model-loading tests.

OpenBLAS must be loaded before the first ``import mlx.core`` in the process (see app/models/blas.py), so this
conftest calls ``enable_openblas()`` at import time, before any test module imports mlx. A root
``tests/conftest.py`` should do the same for the whole suite.
"""

from app.models.blas import enable_openblas

BLAS_LINE = enable_openblas()

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def gguf_metadata():
    """The GGUF's metadata dict (tensors stay lazy and are never read)."""
    from app.models.gguf_smollm2 import locate_gguf, read_gguf

    return read_gguf(locate_gguf())[1]
