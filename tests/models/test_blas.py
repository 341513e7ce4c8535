"""enable_openblas: loads OpenBLAS only before mlx, tells the truth afterwards, never imports mlx itself."""

import os
import subprocess
import sys

import pytest

from app.models.blas import OPENBLAS_PATH, enable_openblas, measure_matmul_gflops

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HAVE_OPENBLAS = sys.platform.startswith("linux") and os.path.exists(OPENBLAS_PATH)


def _python(code: str, **env: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", **env})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_line_is_one_line_and_idempotent():
    line = enable_openblas()
    assert line.startswith("BLAS: ") and "\n" not in line
    assert enable_openblas() == line


def test_importing_the_models_package_does_not_import_mlx():
    out = _python("import sys, app.models, app.models.blas, app.models.registry; "
                  "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm', 'transformers')))")
    assert out == "[]"


@pytest.mark.skipif(not HAVE_OPENBLAS, reason="Debian OpenBLAS not installed")
def test_openblas_loaded_before_mlx_is_mapped_and_reported():
    out = _python("from app.models.blas import enable_openblas; print(enable_openblas()); import mlx.core; "
                  "print(any('openblas' in l for l in open('/proc/self/maps')))")
    line, mapped = out.splitlines()
    assert line.startswith("BLAS: OpenBLAS 0.") and "1 thread" in line
    assert mapped == "True"


@pytest.mark.skipif(not HAVE_OPENBLAS, reason="Debian OpenBLAS not installed")
def test_after_mlx_import_it_refuses_and_says_so():
    out = _python("import mlx.core; from app.models.blas import enable_openblas; print(enable_openblas()); "
                  "print(any('openblas' in l for l in open('/proc/self/maps')))")
    line, mapped = out.splitlines()
    assert "reference BLAS" in line and "imported before" in line
    assert mapped == "False"


@pytest.mark.skipif(not HAVE_OPENBLAS, reason="Debian OpenBLAS not installed")
def test_reference_choice_loads_nothing_and_a_bad_choice_is_refused():
    """SLABSCOPE_BLAS=reference: MLX keeps its bundled BLAS (the numerics tests' third BLAS); other values fail."""
    code = ("from app.models.blas import enable_openblas; print(enable_openblas()); import mlx.core; "
            "print(any('openblas' in l for l in open('/proc/self/maps')))")
    line, mapped = _python(code, SLABSCOPE_BLAS="reference").splitlines()
    assert line == "BLAS: MLX bundled reference BLAS (SLABSCOPE_BLAS=reference)" and mapped == "False"
    assert _python(code, SLABSCOPE_BLAS="openblas").splitlines()[1] == "True"
    out = _python("from app.models.blas import enable_openblas\ntry:\n    enable_openblas()\n"
                  "except ValueError as exc:\n    print(exc)", SLABSCOPE_BLAS="mkl")
    assert out == "SLABSCOPE_BLAS='mkl': expected one of openblas, reference"


def test_missing_library_is_reported_not_loaded():
    out = _python("from app.models.blas import enable_openblas; print(enable_openblas('/nonexistent/libblas.so.3'))")
    assert sys.platform != "linux" or out == "BLAS: MLX bundled reference BLAS (OpenBLAS not found at " \
                                            "/nonexistent/libblas.so.3)"


def test_measure_matmul_gflops_is_a_positive_rate():
    assert measure_matmul_gflops(n=128, repeats=2) > 0.0
