"""Live Prometheus metrics from a run's typed events (mlx-free; ``prometheus-client`` imported on use).

``RunMetrics(registry)`` folds the events a run streams (the ones ``slabscope run`` and ``record`` already read:
samples, pool snapshots, steps, fused decisions, gather runs, finished requests, probe costs, the end) into metrics
labelled by ``backend``; ``serve_metrics(port, addr)`` exposes a registry over HTTP before any work starts (port 0: a
free port). Nothing here measures anything: every value is a figure the probes measured, as it arrived, and the
figures ``probes.figures`` defines are exposed so that PromQL over a whole run gives the number every other surface
prints (``tests/probes/test_same_figures.py`` checks it on a recording, through ``observe_session``).

Metrics (``slabscope_`` prefix; label ``backend``; no ``_created`` series; label values from fixed sets):

* gauges from the latest memory sample: ``footprint_bytes`` (MLX active + cache), ``footprint_peak_bytes`` (its
  largest value since the run started: the 100 Hz peak, which ``max_over_time`` of a scraped gauge misses),
  ``mlx_active_bytes``, ``mlx_cache_bytes``, ``rss_bytes``, ``pool_live_bytes``, ``pool_reserved_bytes``,
  ``pool_slabs`` (slabs held over all layers), ``kv_cache_usage_ratio`` (pool live / reserved bytes, 0..1: vLLM's
  ``kv_cache_usage_perc``);
* from the latest pool snapshot: ``pool_fragmentation`` (the largest over layers), ``pool_free_rows`` (layer 0),
  ``bytes_gathered`` (labels ``phase`` prefill|decode and ``figure`` measured|model: K/V bytes reads copied out of the
  pool since the run began, measured from MLX's allocator when the run meters reads, and the shape-derived model;
  pool/gather_meter.py);
* ``prefill_route_changes_total`` (counter, labels ``route`` paged|gather and ``reason``, pool/prefill_decision.py's
  reason with every number written N, so a bounded set): prefill attention route changes;
* ``gather_runs`` (histogram): same-slab runs per sequence per decode step (its mean and max are the figure
  "gather runs mean/max");
* ``attention_decisions_total`` (counter, labels ``outcome`` fused|gather and ``reason``, the reason's class from the
  fixed set ``probes.figures.REASON_CLASSES``: numbers never enter a label): one per layer per decode step, the
  decision in force; ``decode_batch`` (gauge): the latest decode step's batch;
* ``tokens_total``, ``steps_total`` and ``step_seconds_total`` (counters, label ``type`` prefill|decode): busy tok/s
  is ``sum(rate(slabscope_tokens_total[1m])) / sum(rate(slabscope_step_seconds_total[1m]))``, decode tok/s the same
  with ``type="decode"``;
* requests (vLLM's names where they exist): ``requests_running`` and ``requests_waiting`` (gauges, ``set_requests``),
  ``requests_finished_total``, ``request_ttft_seconds`` and ``request_time_per_output_token_seconds`` (histograms),
  ``prefix_cache_queries_total`` and ``prefix_cache_hits_total`` (prompt tokens looked up / taken from kept or cached
  K/V); fed by ``observe_request_finished`` (a serving engine calls it with each request's timings; a workload's
  ``RequestDone`` events carry no timings, so they feed the counters only). The engine never preempts, so there is
  no preemption counter;
* ``probe_cost_ratio``: the probes' own cost as a fraction of wall time (``probes.figures.probe_cost``);
* ``run_info`` (labels scenario, model, device: "cpu" or "gpu") and ``run_done`` (1 once the run ended).
"""

from __future__ import annotations

import re

from probes import figures
from probes.events import (Done, FusedChange, GatherRuns, MetaUpdate, PrefillRouteChange, ProbeStats, RequestDone,
                           Sample, SnapshotTaken, Step)

RUN_BUCKETS = (*range(1, 17), 24, 32, 48, 64, 128)  # one per run count up to 16: the max is exact
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)  # vLLM's, shortened
TPOT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)
SAMPLE_GAUGES = (("footprint_bytes", "footprint", "MLX active + cache (bytes): the footprint slabscope reports"),
                 ("mlx_active_bytes", "active", "MLX active memory (bytes)"),
                 ("mlx_cache_bytes", "cache", "MLX buffer cache (bytes)"),
                 ("rss_bytes", "rss", "process resident set size (bytes)"),
                 ("pool_live_bytes", "pool_live", "K/V bytes of live pool blocks"),
                 ("pool_reserved_bytes", None, "K/V bytes of reserved pool capacity (live + free rows)"),
                 ("pool_slabs", "pool_slabs", "slabs held over all layers (monolithic: 32-block grow chunks)"))


def device_name(device) -> str:
    """``"gpu"`` / ``"cpu"`` from a recorded device (``"Device(gpu, 0)"``, a dict, or a plain name); '' if none."""
    text = str(device.get("type", device.get("name", "")) if isinstance(device, dict) else device or "")
    match = re.search(r"\b(gpu|cpu)\b", text.lower())
    return match.group(1) if match else text.lower()[:16]


class RunMetrics:
    """Owns the metric families in ``registry``; ``observe(event, backend)`` updates them (any thread)."""

    def __init__(self, registry) -> None:
        from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

        disable_created_metrics()  # a _created series per counter doubled the output and carries nothing here

        self.registry = registry  # more families may share it (slabscope serve's request gauges)

        def gauge(name, doc, labels=("backend",)):
            return Gauge(f"slabscope_{name}", doc, labels, registry=registry)

        def counter(name, doc, labels=("backend",)):
            return Counter(f"slabscope_{name}", doc, labels, registry=registry)

        def histogram(name, doc, buckets):
            return Histogram(f"slabscope_{name}", doc, ["backend"], buckets=buckets, registry=registry)

        self.sample_gauges = {name: (column, gauge(name, doc)) for name, column, doc in SAMPLE_GAUGES}
        self.footprint_peak = gauge("footprint_peak_bytes", "largest MLX active + cache since the run started")
        self.kv_usage = gauge("kv_cache_usage_ratio", "pool live bytes / pool reserved bytes (0..1)")
        self.fragmentation = gauge("pool_fragmentation", "largest fragmentation index over layers (latest snapshot)")
        self.free_rows = gauge("pool_free_rows", "free rows in layer 0 (latest snapshot)")
        self.gather_runs = histogram("gather_runs", "same-slab runs per sequence per decode step", RUN_BUCKETS)
        self.decisions = counter("attention_decisions", "fused paged-decode decisions, one per layer per decode step",
                                 ("backend", "outcome", "reason"))
        self.decode_batch = gauge("decode_batch", "sequences in the latest decode step")
        self.tokens = counter("tokens", "tokens computed", ("backend", "type"))
        self.steps = counter("steps", "forward passes", ("backend", "type"))
        self.step_seconds = counter("step_seconds", "wall time of the forward passes (busy time)", ("backend", "type"))
        self.running = gauge("requests_running", "requests being served")
        self.waiting = gauge("requests_waiting", "requests queued, not yet admitted")
        self.finished = counter("requests_finished", "requests finished")
        self.ttft = histogram("request_ttft_seconds", "time to first token", TTFT_BUCKETS)
        self.tpot = histogram("request_time_per_output_token_seconds", "time per output token after the first",
                              TPOT_BUCKETS)
        self.cache_queries = counter("prefix_cache_queries", "prompt tokens looked up in kept or cached K/V")
        self.cache_hits = counter("prefix_cache_hits", "prompt tokens taken from kept or cached K/V")
        self.probe_cost = gauge("probe_cost_ratio", "the probes' own cost as a fraction of wall time")
        self.gathered = gauge("bytes_gathered", "K/V bytes reads copied out of the pool since the run began "
                              "(figure: measured from MLX's allocator, or the shape-derived model)",
                              ("backend", "phase", "figure"))
        self.prefill_routes = counter("prefill_route_changes", "prefill attention route changes",
                                      ("backend", "route", "reason"))
        self.info = gauge("run_info", "the run: scenario, model and device", ("backend", "scenario", "model", "device"))
        self.done = gauge("run_done", "1 once the run has ended")
        self._layers: dict[str, dict[int, tuple[bool, str]]] = {}
        self._peaks: dict[str, float] = {}

    def observe(self, event, backend: str) -> None:
        match event:
            case Sample():
                self._sample(event, backend)
            case SnapshotTaken(snapshot=snap):
                layers = snap.layers
                self.fragmentation.labels(backend).set(max((layer.fragmentation for layer in layers), default=0.0))
                self.free_rows.labels(backend).set(layers[0].free_rows if layers else 0)
                self._gathered(snap.counters, backend)
            case PrefillRouteChange(use_paged=use, reason=reason):  # numbers out of the label: a bounded set
                label = re.sub(r"\d[\d,]*", "N", reason)
                self.prefill_routes.labels(backend, "paged" if use else "gather", label).inc()
            case Step():
                self._step(event, backend)
            case FusedChange(layer=layer, use_fused=use, reason=reason):
                self._layers.setdefault(backend, {})[layer] = (use, reason)
            case GatherRuns(runs_max=runs):
                for value in runs:
                    self.gather_runs.labels(backend).observe(value)
                for use, reason in self._layers.get(backend, {}).values():
                    self.decisions.labels(backend, "fused" if use else "gather", figures.reason_class(reason)).inc()
            case RequestDone():
                self.observe_request_finished(backend, prompt_tokens=event.prompt_tokens,
                                              generation_tokens=event.generated_tokens,
                                              cached_tokens=event.shared_tokens,
                                              ttft_s=getattr(event, "ttft_s", None), tpot_s=getattr(event, "tpot_s", None))
            case ProbeStats(overhead=overhead):
                self.probe_cost.labels(backend).set(overhead.cost_fraction)
            case MetaUpdate(meta=meta):
                self._info(meta, backend)
            case Done(summary=summary):
                cost = summary.get("probe_overhead") if isinstance(summary, dict) else None
                if isinstance(cost, dict) and isinstance(cost.get("cost_fraction"), (int, float)):
                    self.probe_cost.labels(backend).set(cost["cost_fraction"])
                self.done.labels(backend).set(1)

    # ---- requests: the API a serving engine calls ----------------------------------------------------------------
    def set_requests(self, backend: str, *, running: int, waiting: int) -> None:
        """Requests being served and queued now (call whenever either changes)."""
        self.running.labels(backend).set(running)
        self.waiting.labels(backend).set(waiting)

    def observe_request_finished(self, backend: str, *, prompt_tokens: int, generation_tokens: int,
                                 cached_tokens: int = 0, ttft_s: float | None = None,
                                 tpot_s: float | None = None) -> None:
        """One finished request: its prompt and generated token counts, the prompt tokens taken from kept or cached
        K/V, and (when measured) its time to first token and mean time per output token after the first, seconds.
        Feed each request once: either its ``RequestDone`` event through ``observe`` or this call."""
        self.finished.labels(backend).inc()
        self.cache_queries.labels(backend).inc(prompt_tokens)
        self.cache_hits.labels(backend).inc(cached_tokens)
        if ttft_s is not None:
            self.ttft.labels(backend).observe(ttft_s)
        if tpot_s is not None and generation_tokens > 1:
            self.tpot.labels(backend).observe(tpot_s)

    # ---- events ------------------------------------------------------------------------------------------------
    def _sample(self, sample: Sample, backend: str) -> None:
        for column, gauge in self.sample_gauges.values():
            value = sample.pool_live + sample.pool_free if column is None else getattr(sample, column)
            if value is not None:
                gauge.labels(backend).set(value)
        peak = max(self._peaks.get(backend, 0.0), float(sample.footprint))
        self._peaks[backend] = peak
        self.footprint_peak.labels(backend).set(peak)
        reserved = sample.pool_live + sample.pool_free
        if reserved > 0:
            self.kv_usage.labels(backend).set(sample.pool_live / reserved)

    def _gathered(self, counters, backend: str) -> None:
        """The snapshot's gathered bytes per phase: measured (only when metered) and model."""
        for phase in ("prefill", "decode"):
            measured = getattr(counters, f"{phase}_bytes_gathered", None)
            model = getattr(counters, f"{phase}_bytes_gathered_model", None)
            for figure, value in (("measured", measured), ("model", model)):
                if value is not None:  # None: not metered / not recorded
                    self.gathered.labels(backend, phase, figure).set(value)

    def _step(self, step: Step, backend: str) -> None:
        tokens = step.num_tokens or (step.batch if step.type == "decode" else 0)  # as probes.figures.tok_s counts
        self.tokens.labels(backend, step.type).inc(tokens)
        self.steps.labels(backend, step.type).inc()
        self.step_seconds.labels(backend, step.type).inc(step.wall_s)
        if step.type == "decode":
            self.decode_batch.labels(backend).set(step.batch)

    def _info(self, meta: dict, backend: str) -> None:
        scenario = meta.get("scenario")
        model = meta.get("model")
        self.info.labels(backend, scenario.get("name", "") if isinstance(scenario, dict) else str(scenario or ""),
                         model.get("name", "") if isinstance(model, dict) else str(model or ""),
                         device_name(meta.get("device"))).set(1)
        self.done.labels(backend).set(0)


def observe_session(metrics: RunMetrics, view, backend: str) -> None:
    """Feed a recorded session (``probes.store.SessionModel``) through ``metrics`` in time order, as its run streamed
    it: what the endpoint exposed when the run ended."""
    from probes.events import MetaUpdate as Meta

    metrics.observe(Meta(t=0.0, meta=view.meta), backend)
    stream = [(view.samples.at(i).t, 0, view.samples.at(i)) for i in range(len(view.samples))]
    stream += [(event.t, 1, event) for event in view.events]
    stream += [(record.t, 2, SnapshotTaken(t=record.t, step=record.step, tokens=record.tokens,
                                           snapshot=record.snapshot)) for record in view.snapshots]
    for _t, _order, event in sorted(stream, key=lambda item: (item[0], item[1])):
        metrics.observe(event, backend)
    if view.summary is not None:
        metrics.observe(view.summary, backend)


def serve_metrics(port: int, addr: str = "127.0.0.1"):
    """(RunMetrics, server) with the HTTP endpoint listening on ``addr:port`` (``server.server_port`` is the port,
    also when 0 asked for a free one). OSError when the port cannot be bound (in use, not permitted)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    server, _ = start_http_server(port, addr=addr, registry=registry)
    return metrics, server
