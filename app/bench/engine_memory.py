"""Memory between the engines of one bench process (``bench throughput``): what each engine's run leaves behind is
released before the next runs, and an engine that runs out of memory is that engine's result, not the bench's end.

Seen on the H200: mlx-lm's ``BatchGenerator`` ran out of GPU memory right after dense's run in the same process
(16 prompts of 1k-12k tokens), and the bench died with a traceback, the other engines' figures lost. ``release``
drops what Python still holds (a collection: K/V caches and generators in reference cycles), then MLX's buffer
cache (``mx.clear_cache``), and says what it freed and what the process holds after (MLX active and cache, RSS).
``is_out_of_memory`` reads MLX's allocation failures, whose texts are (mlx ``backend/*/allocator.cpp``):

* ``[malloc] Unable to allocate N bytes.`` (CUDA and Metal: the allocator got no memory),
* ``cudaMallocAsync failed: out of memory`` / ``cudaMalloc failed: out of memory`` (CHECK_CUDA_ERROR's form),
* ``[metal::malloc] Attempting to allocate N bytes which is greater than the maximum allowed buffer size ...`` and
  ``[metal::malloc] Resource limit (N) exceeded.``,
* Metal's command-buffer failure ``... Insufficient Memory (...OutOfMemory)``; and Python's ``MemoryError``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

OOM_MARKERS = ("[malloc] unable to allocate", "[metal::malloc]", "out of memory", "insufficient memory",
               "outofmemory")
MIB = 2**20


def is_out_of_memory(error: BaseException | str) -> bool:
    """True for MLX's (and Python's) out-of-memory failures (module docstring); an exception or its text."""
    if isinstance(error, MemoryError):
        return True
    if isinstance(error, BaseException) and not isinstance(error, RuntimeError):
        return False
    text = str(error).lower()
    return any(marker in text for marker in OOM_MARKERS)


def out_of_memory_result(error: BaseException | str) -> dict:
    """An engine's run that ran out of memory, as its result (no figures: the bench's tables say so)."""
    detail = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return {"error": "out of memory", "detail": detail}


@dataclass(frozen=True)
class Release:
    """What one release freed (bytes), and what the process holds after it."""

    active_before: int
    cache_before: int
    active_after: int
    cache_after: int
    rss_after: int
    objects_collected: int

    def line(self) -> str:
        freed = (self.active_before - self.active_after) + (self.cache_before - self.cache_after)
        return (f"released {freed / MIB:,.1f} MiB (MLX cache {self.cache_before / MIB:,.1f} -> "
                f"{self.cache_after / MIB:,.1f} MiB, active {self.active_before / MIB:,.1f} -> "
                f"{self.active_after / MIB:,.1f} MiB, {self.objects_collected} objects collected); process now: "
                f"MLX active {self.active_after / MIB:,.1f} MiB, cache {self.cache_after / MIB:,.1f} MiB, RSS "
                f"{self.rss_after / MIB:,.1f} MiB")

    def to_json(self) -> dict:
        return asdict(self)


def release() -> Release:
    """Free what the last engine's run left: a garbage collection, then MLX's buffer cache. Reads MLX's counters
    before and after, and the process's RSS after."""
    import gc

    import mlx.core as mx
    import psutil

    active, cache = mx.get_active_memory(), mx.get_cache_memory()
    collected = gc.collect()
    mx.clear_cache()
    return Release(active, cache, mx.get_active_memory(), mx.get_cache_memory(),
                   psutil.Process().memory_info().rss, collected)
