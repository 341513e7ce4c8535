"""The decode path's first use, paid at load on a GPU instead of in the run's first decode step.

A run's prefill chunks run the model's trunk only, so its first decode step is the process's first use of the LM
head at the decode batch size, of the batched RoPE offsets, ``logsumexp`` and ``argmax``: on CUDA, MLX builds or
loads kernels and cuBLAS picks algorithms for those shapes then. Measured on the H200 (docs/gpu.md): the first
decode step of a fresh process took 103-130 ms (slab) and 167-223 ms (dense) against a ~10 ms median step, most of
it such first uses. ``warm_decode_path`` runs one decode step of the whole model on a throwaway ``BatchKVCache`` at
the batch size the run's first phase will decode at, before the run starts (its time is reported in the run's
metadata, ``decode_warmup_s``). It draws no random numbers (greedy argmax), touches no cache of the run and leaves
nothing in MLX's buffer cache, so the run's bytes and footprint are the same with or without it. The fused kernel's own binaries are built and loaded by
``pool.kernels.cuda_builds``, not here.
"""

from __future__ import annotations

import time


def first_decode_batch(scenario) -> int:
    """Sequences the scenario's first request phase decodes together: its concurrency, at most its count."""
    for phase in scenario.phases:
        if phase.kind == "requests" and phase.count:
            return max(1, min(phase.concurrency, phase.count))
    return 1


def warm_decode_path(model, batch: int) -> float:
    """One decode step of ``model`` for ``batch`` sequences of one token on throwaway caches, evaluated; returns its
    seconds. Mutates nothing the run reads (its caches are dropped; no random state is used)."""
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache

    t0 = time.perf_counter()
    caches = [BatchKVCache([0] * batch) for _ in model.layers]
    logits = model(mx.zeros((batch, 1), dtype=mx.int32), cache=caches)[:, -1, :]
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    mx.eval(mx.argmax(logprobs, axis=-1))
    del caches, logits, logprobs
    # Its buffers go back to the device, not into MLX's cache, where the run's footprint would count them: a
    # BatchKVCache reserves 256 tokens per layer (16 sequences of qwen3-0.6b: 16 x 8 heads x 256 x 128 x 2 bytes,
    # K and V, 28 layers = 448 MiB).
    mx.clear_cache()
    return time.perf_counter() - t0


def wants_warmup(device: str | None) -> bool:
    """Warm on a GPU only: on a CPU the decode path's first use costs no compile worth a step's time."""
    import mlx.core as mx

    return device == "gpu" or (device is None and mx.default_device() == mx.gpu)
