"""Fixtures for the serving tests: tiny synthetic models (loaded once), serving sessions on every backend.

OpenBLAS is loaded before the first mlx import (the root conftest does it too; this keeps the folder runnable on
its own).
"""

from app.models.blas import enable_openblas

enable_openblas()

import pytest  # noqa: E402

_LOADED: dict = {}


def load(name: str):
    """A model loaded once per test session (fp32 on CPU)."""
    from app.models import load_model

    if name not in _LOADED:
        _LOADED[name] = load_model(name, dtype="float32", device="cpu")
    return _LOADED[name]


@pytest.fixture(scope="session")
def tiny_llama():
    return load("synthetic:tiny-llama")


@pytest.fixture(scope="session")
def tiny_qwen3():
    return load("synthetic:tiny-qwen3")
