"""``probes.prometheus.RunMetrics`` on hand-made events (no run, no server): the reserved-capacity gauge is live +
free rows (not live bytes), and the tokens rate covers only the last ``RATE_WINDOW_S`` seconds of steps."""

from __future__ import annotations

import pytest

from probes.events import Sample, Step
from probes.prometheus import RATE_WINDOW_S, RunMetrics

prometheus_client = pytest.importorskip("prometheus_client")


def _metrics():
    registry = prometheus_client.CollectorRegistry()
    return RunMetrics(registry), registry


def _value(registry, name: str, **labels) -> float | None:
    return registry.get_sample_value(name, {"backend": "slab", **labels})


def _sample(pool_live: int, pool_free: int) -> Sample:
    return Sample(t=1.0, active=5000, cache=700, footprint=5700, peak=5000, footprint_max=5700, rss=9000,
                  rss_max=9000, sys_available=0, weights=0, pool_live=pool_live, pool_free=pool_free,
                  other_active=0, rss_other=0, cost_us=0.0, pool_slabs=3)


def test_reserved_gauge_is_live_plus_free_rows_and_differs_from_live_bytes():
    metrics, registry = _metrics()
    metrics.observe(_sample(pool_live=300, pool_free=200), "slab")
    assert _value(registry, "slabscope_pool_live_bytes") == 300
    assert _value(registry, "slabscope_pool_reserved_bytes") == 500  # capacity > live: the two gauges differ
    assert _value(registry, "slabscope_footprint_bytes") == 5700
    assert _value(registry, "slabscope_mlx_cache_bytes") == 700
    assert _value(registry, "slabscope_pool_slabs") == 3
    metrics.observe(_sample(pool_live=300, pool_free=0), "slab")  # every reserved row live
    assert _value(registry, "slabscope_pool_reserved_bytes") == 300


def _step(t: float, tokens: int, wall_s: float) -> Step:
    return Step(t=t, step=1, tokens=tokens, phase="p", type="decode", batch=1, num_tokens=tokens, wall_s=wall_s)


def test_tokens_rate_covers_only_the_last_window_of_steps():
    """A fast burst long ago (1,000 tokens in 1 s) then a slow stretch (10 tokens per 1 s step): once the burst is
    older than the window the rate is the slow one's, 10 tok/s; never windowed it would stay near 1,010 / 3 s."""
    metrics, registry = _metrics()
    metrics.observe(_step(100.0, 1000, 1.0), "slab")
    rate = lambda: _value(registry, "slabscope_tokens_per_second", type="decode")  # noqa: E731
    assert rate() == 1000.0
    metrics.observe(_step(100.0 + RATE_WINDOW_S / 2, 10, 1.0), "slab")
    assert rate() == 1010 / 2  # both inside the window
    metrics.observe(_step(100.0 + RATE_WINDOW_S + 1.0, 10, 1.0), "slab")
    assert rate() == 20 / 2  # the burst left the window
    metrics.observe(_step(100.0 + 3 * RATE_WINDOW_S, 10, 1.0), "slab")
    assert rate() == 10.0
    assert _value(registry, "slabscope_tokens_total", type="decode") == 1030  # the counter keeps every token
