"""Suite-wide setup: load OpenBLAS before anything imports mlx (fp32 matmul is ~30x faster with it on CPU); the
``cli`` fixture (one in-process ``slabscope`` invocation); the embedded model, loaded once for the whole session
(tests/models and tests/workloads both read it, never change it)."""

import os

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

try:
    from app.models.blas import enable_openblas
except ImportError:  # models package not importable: tests still run on MLX's reference BLAS
    enable_openblas = None

if enable_openblas is not None:
    enable_openblas()


@pytest.fixture
def cli(capsys):
    """``cli(argv) -> (exit code, stdout, stderr lines)`` of one in-process ``slabscope`` invocation (a usage
    error's SystemExit becomes its code)."""
    from app.cli import main

    def run(argv: list[str]) -> tuple[int, str, list[str]]:
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err.strip().splitlines()

    return run


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct, fp32 on CPU, loaded once per test session (~2-3 s) and shared."""
    from app.models import load_model

    return load_model("smollm2-135m", dtype="float32", device="cpu")


@pytest.fixture(scope="session")
def tiny_llama():
    """The synthetic tiny llama, fp32 on CPU, loaded once per process (tests/workloads/helpers.py's cache)."""
    from workloads.helpers import load

    return load("synthetic:tiny-llama")


@pytest.fixture(scope="session")
def tiny_qwen3():
    """The synthetic tiny qwen3, fp32 on CPU, loaded once per process."""
    from workloads.helpers import load

    return load("synthetic:tiny-qwen3")
