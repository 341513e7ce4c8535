"""Model loading for slabscope's workloads: the embedded SmolLM2 GGUF, synthetic models, local mlx-lm folders.

Importing this package never imports mlx (the TUI process lists models through it); ``load_model`` and
``greedy_generate`` import mlx when called. On Linux, call ``enable_openblas()`` before anything imports
``mlx.core`` (``load_model`` calls it too, which only helps if mlx is not imported yet).

    from app.models import enable_openblas, load_model, greedy_generate
    enable_openblas()
    loaded = load_model("smollm2-135m")          # or "synthetic:tiny-llama", or a model directory
    ids = loaded.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    result = greedy_generate(loaded, ids, max_tokens=32)
"""

from .blas import blas_line, enable_openblas, measure_matmul_gflops
from .reference import GreedyResult, greedy_generate, logits_from_hidden
from .registry import DEFAULT_MODEL, LoadedModel, list_models, load_model, resolve_model_name
from .synthetic import SYNTHETIC_CONFIGS, ByteTokenizer

__all__ = [
    "DEFAULT_MODEL", "SYNTHETIC_CONFIGS", "ByteTokenizer", "GreedyResult", "LoadedModel", "blas_line",
    "enable_openblas", "greedy_generate", "list_models", "load_model", "logits_from_hidden",
    "measure_matmul_gflops", "resolve_model_name",
]
