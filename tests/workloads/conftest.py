"""Fixtures for the workload tests: tiny synthetic models, scenario files written on the fly, three-backend runs.

OpenBLAS is loaded before the first mlx import (the root conftest does it too; this keeps the folder runnable on
its own).
"""

from app.models.blas import enable_openblas

enable_openblas()

import pytest  # noqa: E402

from .helpers import load  # noqa: E402


@pytest.fixture(scope="session")
def tiny_llama():
    return load("synthetic:tiny-llama")


@pytest.fixture(scope="session")
def tiny_qwen3():
    return load("synthetic:tiny-qwen3")

