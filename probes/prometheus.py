"""Live Prometheus metrics from a run's typed events (mlx-free; ``prometheus-client`` imported on use).

``RunMetrics(registry)`` folds the events a run streams (the ones ``slabscope run`` and ``record`` already read:
samples, pool snapshots, steps, fused decisions, gather runs, the end) into metrics labelled by ``backend``;
``serve_metrics(port, addr)`` exposes a registry over HTTP before any work starts (port 0: a free port). Nothing
here measures anything: every value is a figure the probes measured, as it arrived.

Metrics (``slabscope_`` prefix, label ``backend``):

* gauges from the latest memory sample: ``footprint_bytes`` (MLX active + cache), ``mlx_active_bytes``,
  ``mlx_cache_bytes``, ``rss_bytes``, ``pool_live_bytes``, ``pool_reserved_bytes``, ``pool_slabs``;
* from the latest pool snapshot: ``pool_fragmentation`` (the largest over layers; 0 nothing free or all in one
  run), ``pool_free_rows``, ``bytes_gathered`` (labels ``phase`` prefill|decode and ``figure`` measured|model: K/V
  bytes reads copied out of the pool since the run began, measured from MLX's allocator when the run meters reads,
  and the shape-derived model; pool/gather_meter.py);
* ``prefill_route_changes_total`` (counter, labels ``route`` paged|gather and ``reason``): prefill route changes;
* ``gather_runs`` (histogram): same-slab runs per sequence per decode step (layer 0, what a gather reads);
* ``attention_decisions_total`` (counter, labels ``outcome`` fused|gather and ``reason``): one per layer per
  decode step, the decision in force (``FusedChange`` events carry changes only; each ``GatherRuns`` event closes a
  decode step), so the totals equal the run summary's ``fused_decode`` counts;
* ``tokens_total`` and ``steps_total`` (counters, label ``type`` prefill|decode); ``tokens_per_second`` (gauge,
  label ``type``): tokens over busy step time in the last ``RATE_WINDOW_S`` seconds of steps;
* ``run_info`` (labels scenario, model, device) and ``run_done`` (1 once the run ended).
"""

from __future__ import annotations

from collections import deque

from probes.events import Done, FusedChange, GatherRuns, MetaUpdate, PrefillRouteChange, Sample, SnapshotTaken, Step

RATE_WINDOW_S = 5.0
RUN_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)
SAMPLE_GAUGES = (("footprint_bytes", "footprint", "MLX active + cache (bytes): the footprint slabscope reports"),
                 ("mlx_active_bytes", "active", "MLX active memory (bytes)"),
                 ("mlx_cache_bytes", "cache", "MLX buffer cache (bytes)"),
                 ("rss_bytes", "rss", "process resident set size (bytes)"),
                 ("pool_live_bytes", "pool_live", "K/V bytes of live pool blocks"),
                 ("pool_reserved_bytes", None, "K/V bytes of reserved pool capacity (live + free rows)"),
                 ("pool_slabs", "pool_slabs", "slabs (monolithic: 32-block grow chunks) over layers"))


class RunMetrics:
    """Owns the metric families in ``registry``; ``observe(event, backend)`` updates them (any thread)."""

    def __init__(self, registry) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.registry = registry  # more families may share it (slabscope serve's request gauges)

        def gauge(name, doc, labels=("backend",)):
            return Gauge(f"slabscope_{name}", doc, labels, registry=registry)

        self.sample_gauges = {name: (column, gauge(name, doc)) for name, column, doc in SAMPLE_GAUGES}
        self.fragmentation = gauge("pool_fragmentation", "largest fragmentation index over layers (latest snapshot)")
        self.free_rows = gauge("pool_free_rows", "free rows in layer 0 (latest snapshot)")
        self.gathered = gauge("bytes_gathered", "K/V bytes reads copied out of the pool since the run began "
                              "(figure: measured from MLX's allocator, or the shape-derived model)",
                              ("backend", "phase", "figure"))
        self.prefill_routes = Counter("slabscope_prefill_route_changes", "prefill attention route changes",
                                      ["backend", "route", "reason"], registry=registry)
        self.gather_runs = Histogram("slabscope_gather_runs", "same-slab runs per sequence per decode step "
                                     "(layer 0)", ["backend"], buckets=RUN_BUCKETS, registry=registry)
        self.decisions = Counter("slabscope_attention_decisions", "fused paged-decode decisions, one per layer per "
                                 "decode step", ["backend", "outcome", "reason"], registry=registry)
        self.tokens = Counter("slabscope_tokens", "tokens processed", ["backend", "type"], registry=registry)
        self.steps = Counter("slabscope_steps", "forward passes", ["backend", "type"], registry=registry)
        self.rate = gauge("tokens_per_second", f"tokens / busy step time over the last {RATE_WINDOW_S:g} s of steps",
                          ("backend", "type"))
        self.info = gauge("run_info", "the run: scenario, model and device", ("backend", "scenario", "model", "device"))
        self.done = gauge("run_done", "1 once the run has ended")
        self._layers: dict[str, dict[int, tuple[bool, str]]] = {}
        self._recent: dict[tuple[str, str], deque] = {}

    def observe(self, event, backend: str) -> None:
        match event:
            case Sample():
                self._sample(event, backend)
            case SnapshotTaken(snapshot=snap):
                layers = snap.layers
                self.fragmentation.labels(backend).set(max((layer.fragmentation for layer in layers), default=0.0))
                self.free_rows.labels(backend).set(layers[0].free_rows if layers else 0)
                self._gathered(snap.counters, backend)
            case PrefillRouteChange(use_paged=use, reason=reason):
                self.prefill_routes.labels(backend, "paged" if use else "gather", reason).inc()
            case Step():
                self._step(event, backend)
            case FusedChange(layer=layer, use_fused=use, reason=reason):
                self._layers.setdefault(backend, {})[layer] = (use, reason)
            case GatherRuns(runs_layer0=runs):
                for value in runs:
                    self.gather_runs.labels(backend).observe(value)
                for use, reason in self._layers.get(backend, {}).values():
                    self.decisions.labels(backend, "fused" if use else "gather", reason).inc()
            case MetaUpdate(meta=meta):
                self._info(meta, backend)
            case Done():
                self.done.labels(backend).set(1)

    def _sample(self, sample: Sample, backend: str) -> None:
        for column, gauge in self.sample_gauges.values():
            value = sample.pool_live + sample.pool_free if column is None else getattr(sample, column)
            if value is not None:
                gauge.labels(backend).set(value)

    def _gathered(self, counters, backend: str) -> None:
        """The snapshot's gathered bytes per phase: measured (only when metered) and model."""
        for phase in ("prefill", "decode"):
            measured = getattr(counters, f"{phase}_bytes_gathered", None)
            model = getattr(counters, f"{phase}_bytes_gathered_model", None)
            for figure, value in (("measured", measured), ("model", model)):
                if value is not None:  # None: not metered / not recorded
                    self.gathered.labels(backend, phase, figure).set(value)

    def _step(self, step: Step, backend: str) -> None:
        self.tokens.labels(backend, step.type).inc(step.num_tokens)
        self.steps.labels(backend, step.type).inc()
        recent = self._recent.setdefault((backend, step.type), deque())
        recent.append((step.t, step.num_tokens, step.wall_s))
        while recent and recent[0][0] < step.t - RATE_WINDOW_S:
            recent.popleft()
        wall = sum(w for _, _, w in recent)
        if wall > 0:
            self.rate.labels(backend, step.type).set(sum(n for _, n, _ in recent) / wall)

    def _info(self, meta: dict, backend: str) -> None:
        scenario = meta.get("scenario")
        model = meta.get("model")
        self.info.labels(backend, scenario.get("name", "") if isinstance(scenario, dict) else str(scenario or ""),
                         model.get("name", "") if isinstance(model, dict) else str(model or ""),
                         str(meta.get("device", ""))).set(1)
        self.done.labels(backend).set(0)


def serve_metrics(port: int, addr: str = "127.0.0.1"):
    """(RunMetrics, server) with the HTTP endpoint listening on ``addr:port`` (``server.server_port`` is the port,
    also when 0 asked for a free one). OSError when the port cannot be bound (in use, not permitted)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    server, _ = start_http_server(port, addr=addr, registry=registry)
    return metrics, server
