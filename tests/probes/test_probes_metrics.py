"""``probes.prometheus.RunMetrics`` on hand-made events (no run, no server): the reserved-capacity gauge is live +
free rows (not live bytes), and the token and step-time counters keep every step, so that PromQL's ``rate()``
quotient over a run is the busy tok/s ``probes.figures.tok_s`` defines (no home-made windowed tok/s gauge)."""

from __future__ import annotations

import pytest

from probes.events import Sample, Step
from probes import figures
from probes.prometheus import RunMetrics
from probes.store import SessionModel

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


def _step(t: float, kind: str, tokens: int, wall_s: float) -> Step:
    return Step(t=t, step=1, tokens=tokens, phase="p", type=kind, batch=1, num_tokens=tokens, wall_s=wall_s)


def test_token_counters_keep_every_step_and_their_quotient_is_busy_tok_s():
    """A fast prefill then slow decode steps: the counters hold every token and every step's seconds by type, and
    tokens_total / step_seconds_total is the busy tok/s of ``probes.figures`` over the same steps (decode tok/s with
    type="decode"). A windowed gauge (the old ``tokens_per_second``) or a counter dropping a step fails here."""
    metrics, registry = _metrics()
    steps = [_step(100.0, "prefill", 1000, 0.5), _step(101.0, "decode", 10, 1.0), _step(140.0, "decode", 10, 1.0)]
    model = SessionModel(label="slab")
    for step in steps:
        metrics.observe(step, "slab")
        model.append(step)
    total = lambda name, kind: _value(registry, f"slabscope_{name}_total", type=kind)  # noqa: E731
    assert (total("tokens", "prefill"), total("tokens", "decode")) == (1000, 20)
    assert (total("step_seconds", "prefill"), total("step_seconds", "decode")) == (0.5, 2.0)
    assert (total("steps", "prefill"), total("steps", "decode")) == (1, 2)
    busy = (total("tokens", "prefill") + total("tokens", "decode")) / (0.5 + 2.0)
    assert busy == figures.tok_s(model, "busy") == 1020 / 2.5
    assert total("tokens", "decode") / total("step_seconds", "decode") == figures.tok_s(model, "decode") == 10.0
    assert _value(registry, "slabscope_tokens_per_second", type="decode") is None
