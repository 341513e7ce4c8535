"""Suite-wide setup: load OpenBLAS before anything imports mlx (fp32 matmul is ~30x faster with it on CPU); the
``cli`` fixture (one in-process ``slabscope`` invocation)."""

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
