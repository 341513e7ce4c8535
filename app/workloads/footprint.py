"""In-process footprint tracking at step boundaries: max(MLX active + cache) and peak process RSS.

MLX's ``get_peak_memory()`` counts active memory only; buffers MLX keeps in its cache are memory the process
holds too, so the footprint we report is the maximum of ``active + cache`` over the samples taken (one per
step: two MLX counter reads and one ``psutil`` RSS read, a few microseconds). The probes' sampler thread measures
the same quantities at a fixed rate; this tracker is the workload's own summary and works without probes.
"""

from __future__ import annotations

import psutil


class FootprintTracker:
    """Owns running maxima of active, cache, active+cache and RSS (bytes); ``sample()`` updates them."""

    def __init__(self):
        import mlx.core as mx

        from pool.copy_meter import peak_memory

        self._mx = mx
        self._peak_memory = peak_memory  # MLX's peak, corrected for the resets of the pool's copy meter
        self._proc = psutil.Process()
        self.max_active = self.max_cache = self.max_footprint = self.max_rss = 0
        self.samples = 0

    def sample(self) -> int:
        """Read the counters once; returns the current footprint (active + cache) in bytes."""
        active = self._mx.get_active_memory()
        cache = self._mx.get_cache_memory()
        rss = self._proc.memory_info().rss
        self.max_active = max(self.max_active, active)
        self.max_cache = max(self.max_cache, cache)
        self.max_footprint = max(self.max_footprint, active + cache)
        self.max_rss = max(self.max_rss, rss)
        self.samples += 1
        return active + cache

    def summary(self) -> dict:
        return {"max_footprint_bytes": self.max_footprint, "max_active_bytes": self.max_active,
                "max_cache_bytes": self.max_cache, "mlx_peak_bytes": self._peak_memory(),
                "max_rss_bytes": self.max_rss, "samples": self.samples,
                "how": "max(active+cache) and RSS sampled in-process at every step boundary"}
