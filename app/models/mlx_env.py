"""MLX settings read from the environment when mlx starts, which slabscope sets for every engine in a process.

``MLX_CUDA_GRAPH_CACHE_SIZE``: how many instantiated CUDA graphs MLX keeps (an LRU, 400 by default in MLX 0.32).
One burst's prefill (64 chunks of qwen3-0.6b) goes through more distinct graphs than that, so the decode graphs
that the load-time rehearsal (``app/workloads/rehearsal.py``) instantiated were evicted before the run's first
decode step, which then instantiated them again. 1000 keeps them; it applies to every backend and to mlx-lm's
engine in the same process alike. A value the user set is kept. MLX reads it when its CUDA device starts, so it
is set by the bootstrap that runs before mlx is imported (``app.models.blas.enable_openblas``). Never imports mlx.
"""

from __future__ import annotations

import os

GRAPH_CACHE_ENV = "MLX_CUDA_GRAPH_CACHE_SIZE"
GRAPH_CACHE_SIZE = 1000
# MLX settings a run's metadata reports (what each was in this process; None: MLX's default)
REPORTED = (GRAPH_CACHE_ENV, "MLX_USE_CUDA_GRAPHS", "MLX_MAX_OPS_PER_BUFFER", "MLX_MAX_MB_PER_BUFFER")


def apply_mlx_defaults(environ=None) -> None:
    """Set slabscope's MLX defaults in ``environ`` (default: this process's) where the user set nothing."""
    environ = os.environ if environ is None else environ
    environ.setdefault(GRAPH_CACHE_ENV, str(GRAPH_CACHE_SIZE))


def mlx_env_meta(environ=None) -> dict:
    """The reported MLX settings as this process has them (None: unset, MLX's default)."""
    environ = os.environ if environ is None else environ
    return {name: environ.get(name) for name in REPORTED}
