"""``slabscope serve``'s request metrics beside the probes' (``probes.prometheus.RunMetrics``), in the same registry
(mlx-free): ``slabscope_serve_requests_running`` and ``_waiting`` (gauges read at scrape time from the engine's
latest counts) and ``slabscope_serve_requests_finished_total`` by finish reason (length, stop, error, ...). Request
latency histograms in vLLM's style are left to their own issue."""

from __future__ import annotations


class ServeMetrics:
    """Owns the serve families in ``registry``; ``finished(reason)`` counts one finished request."""

    def __init__(self, registry, engine, backend: str) -> None:
        from prometheus_client import Counter, Gauge

        running = Gauge("slabscope_serve_requests_running", "requests in the engine's batch", ["backend"],
                        registry=registry)
        waiting = Gauge("slabscope_serve_requests_waiting", "requests queued for the batch", ["backend"],
                        registry=registry)
        running.labels(backend).set_function(lambda: engine.running)
        waiting.labels(backend).set_function(lambda: engine.waiting)
        self._finished = Counter("slabscope_serve_requests_finished", "requests answered, by finish reason",
                                 ["backend", "reason"], registry=registry)
        self.backend = backend

    def finished(self, reason: str) -> None:
        self._finished.labels(self.backend, reason).inc()
