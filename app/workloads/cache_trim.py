"""When a run trims MLX's buffer cache: between prefill chunks, once the cache holds more than a budget.

Why: every prefill chunk attends over a longer prefix than the one before, so the attention's temporaries (scores,
masks, softmax outputs: ~50 KB per key position per chunk on qwen3-0.6b) come in a new size each chunk. MLX keeps
freed buffers in its cache and reuses one only for a request of nearly the same size, so a long prompt leaves a
ladder of ever larger, never reused buffers behind (about P^2/2 score elements for a P-token prompt, whatever the
chunk size). On CUDA and Metal that ladder is real memory the process holds (footprint = active + cache).

Policy: before a prefill chunk is dispatched, if the cache exceeds ``fraction`` x (weight bytes + K/V bytes of the
running sequences at their final lengths), and at least ``MIN_TRIM_BYTES``, the engine waits for the chunk in flight
and releases the cache (``mx.clear_cache``), then dispatches: freeing device memory synchronises, and with nothing
in flight it waits for nothing (trimming after a dispatch would also wait for the new chunk and leave the device
idle while the host builds the next one). The budget keeps the buffers every chunk reuses (MLP and projection
temporaries of one chunk are far below it) and drops the ladder before it grows past the budget. A trim waits for
the device (freeing device memory synchronises), so it is rare by design; ``trims`` counts them and the run summary
reports the count. The same policy runs on every backend (the engine owns it), so backends stay
comparable; ``fraction=None`` turns it off. By default (``--prefill-trim auto``) a run trims only when the prefill
in-flight bound is off (app/workloads/inflight_bound.py): under the bound MLX's allocator gives cached buffers back
while a chunk is encoded, and on the H200 trims then bought no footprint and cost prefill time (docs/prefill.md).
mlx is imported lazily.
"""

from __future__ import annotations

DEFAULT_FRACTION = 0.05
MIN_TRIM_BYTES = 64 * 2**20  # below this the cache is never worth a trim (and on the CPU, where MLX hands large
                             # buffers back, the cache never holds a ladder: small runs never trim)


class CacheTrim:
    """Owns the trim count; reads MLX's cache size, mutates only MLX's buffer cache."""

    def __init__(self, *, weight_bytes: int, bytes_per_token: int, fraction: float | None = DEFAULT_FRACTION,
                 min_bytes: int | None = None):
        self.min_bytes = MIN_TRIM_BYTES if min_bytes is None else int(min_bytes)
        self.weight_bytes = int(weight_bytes)
        self.bytes_per_token = int(bytes_per_token)
        self.fraction = fraction
        self.trims = 0
        self.trimmed_bytes = 0

    def budget(self, tokens: int) -> int:
        """Cache bytes allowed before a trim: the fraction of (weights + K/V of ``tokens``, the running sequences'
        final lengths: the run's peak, known from the first chunk), at least ``min_bytes``."""
        return max(self.min_bytes, int((self.fraction or 0.0) * (self.weight_bytes + tokens * self.bytes_per_token)))

    def due(self, tokens: int) -> bool:
        """True when the cache holds more than the budget (one cheap counter read)."""
        if self.fraction is None:
            return False
        import mlx.core as mx

        return mx.get_cache_memory() > self.budget(tokens)

    def trim(self) -> None:
        """Release MLX's cache now (frees device memory: waits for the work in flight)."""
        import mlx.core as mx

        self.trimmed_bytes += mx.get_cache_memory()
        mx.clear_cache()
        self.trims += 1

    def after_prefill_chunk(self, tokens: int) -> bool:
        """Trim if the cache is over budget; True when it trimmed."""
        if not self.due(tokens):
            return False
        self.trim()
        return True

    def summary(self) -> dict:
        return {"fraction": self.fraction, "trims": self.trims, "trimmed_bytes": self.trimmed_bytes}


def kv_bytes_per_token(loaded) -> int:
    """K and V bytes one token takes in every layer (the model's geometry, in its activation dtype)."""
    itemsize = {"float32": 4, "bfloat16": 2, "float16": 2}.get(loaded.dtype, 4)
    return 2 * loaded.num_layers * loaded.n_kv_heads * loaded.head_dim * itemsize
