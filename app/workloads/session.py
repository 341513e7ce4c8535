"""A workload session: model + KV backend (pool or dense) + scheduler + engine + prompt source for one run.

``build_session`` wires them from a ``RunSpec`` and a ``Scenario``; the runner drives phases through it. The
session owns the pool (if any) and the prefix cache, and ``close()`` releases everything it still holds.
"""

from __future__ import annotations

import math
import os
import platform
import sys
from dataclasses import asdict

import msgspec

from app.models.mlx_env import mlx_env_meta
from app.workloads.backends import DenseBackend, PagedBackend
from app.workloads.engine import Engine, make_sampler
from app.workloads.limits import check_fits_context
from app.workloads.prompts import TokenSource, make_source, phase_requests, request_ids_used, shared_prefix
from app.workloads.scenarios import Phase, Scenario
from app.workloads.scheduler import Scheduler
from app.workloads.spec import RunSpec, prefill_batch_tokens_for, resolved_pool_params


class WorkloadSession:
    """Owns one run's objects. ``submit_phase`` queues a phase's requests; ``close`` empties the pool."""

    def __init__(self, spec: RunSpec, scenario: Scenario, loaded, backend, scheduler: Scheduler, engine: Engine,
                 source: TokenSource, pool_params: dict):
        self.spec, self.scenario, self.loaded = spec, scenario, loaded
        self.backend, self.scheduler, self.engine, self.source = backend, scheduler, engine, source
        self.pool_params = pool_params
        self.sdpa_module: str | None = None  # model module whose scaled_dot_product_attention we rebound
        self.rehearsal = None  # RehearsalReport of the load-time rehearsal (None: not run; rehearsal.py)
        self._next_request = 0
        self.shared_prefix = shared_prefix(scenario, source)  # one system prompt for every phase that asks

    @property
    def pool(self):
        return self.backend.pool

    def submit_phase(self, phase: Phase) -> None:
        requests = phase_requests(phase, self.source, first_id=self._next_request, shared=self.shared_prefix)
        self._next_request += request_ids_used(phase)
        self.scheduler.set_concurrency(phase.concurrency)
        self.scheduler.submit(requests)

    def check_integrity(self) -> None:
        self.scheduler.check_integrity()
        self.backend.check_integrity()
        running = sorted(s.seq_id for s in self.scheduler.running)
        live = sorted(self.backend.live_sequences())
        assert live == running, f"backend holds sequences {live}, scheduler runs {running}"

    def pool_summary(self) -> dict:
        out: dict = {"pool_params": dict(self.pool_params)}
        if self.pool is not None:
            snap = self.pool.snapshot()
            out["pool"] = {"stats": snap.stats.to_dict(), "counters": snap.counters.to_dict(),
                           "num_slabs": [layer.num_chunks for layer in snap.layers[:1]],
                           "bytes_per_row": snap.bytes_per_row}
            decisions = self.pool.decisions
            out["fused_decode"] = {"fused": decisions.fused, "gather": decisions.gather,
                                   "reasons": dict(decisions.by_reason), **(self._fused_meta() or {})}
            prefill = self.pool.prefill_decisions
            out["prefill_attention"] = {"paged": prefill.paged, "gather": prefill.gather,
                                        "reasons": dict(prefill.by_reason),
                                        "bytes_gathered_metered": self.pool.gather_meter.measuring}
        if self.backend.prefix_cache is not None:
            out["prefix_cache"] = self.backend.prefix_cache.counters()
        out["conversations"] = self.backend.conversations.counters()
        if self.engine.cache_trim is not None:
            out["cache_trim"] = self.engine.cache_trim.summary()
        if self.engine.inflight_bound is not None:
            out["prefill_inflight"] = self.engine.inflight_bound.summary()
        if self.pool is not None:
            out["shrink"] = self.engine.shrink_tally.summary(self.pool.config.shrink.mode)
        return out

    def meta(self) -> dict:
        import mlx.core as mx
        import mlx_lm

        from app.models.blas import blas_line

        loaded = self.loaded
        return {
            "versions": {"python": platform.python_version(), "mlx": mx.__version__, "mlx_lm": mlx_lm.__version__,
                         "slabscope": _slabscope_version()},
            "device": str(mx.default_device()), "pid": os.getpid(), "platform": sys.platform,
            "blas": blas_line(),
            "model": {"name": loaded.name, "family": loaded.family, "dtype": loaded.dtype,
                      "num_layers": loaded.num_layers, "n_kv_heads": loaded.n_kv_heads,
                      "head_dim": loaded.head_dim, "weight_bytes": loaded.weight_bytes},
            "scenario": {"name": self.scenario.name, "description": self.scenario.description,
                         "params": dict(self.scenario.params),
                         "phases": [asdict(p) for p in self.scenario.phases]},
            "backend": self.spec.backend,
            "pool": {"design": self.spec.backend if self.pool is not None else None, **self.pool_params,
                     "max_blocks_per_layer": self.spec.max_blocks_per_layer,
                     "shrink": msgspec.to_builtins(self.pool.config.shrink) if self.pool is not None else None},
            "spec": self.spec.to_dict(),
            "fused_decode": self._fused_meta(),
            "mlx_cache": {"limit_bytes": self.spec.cache_limit, "limit": "MLX default" if self.spec.cache_limit is None
                          else f"{self.spec.cache_limit} bytes (mx.set_cache_limit)",
                          "prefill_trim_fraction": self.spec.trim_fraction(), "prefill_trim": self.spec.prefill_trim,
                          "prefill_inflight_bytes": self.spec.prefill_inflight},
            "rehearsal": self.rehearsal.to_dict() if self.rehearsal is not None else None,
            "mlx_env": mlx_env_meta(),
        }

    def _fused_meta(self) -> dict | None:
        kernel = getattr(self.backend, "kernel", None)
        if kernel is None:
            return None
        return {"backend": kernel.backend, "registered": list(kernel.registered), "sdpa_module": self.sdpa_module,
                "build": kernel.meta() if hasattr(kernel, "meta") else {"mode": "none"}}

    def close(self) -> None:
        """Release every running sequence, kept conversation and cached prefix; restore mlx-lm's SDPA."""
        from app.workloads.fused_attention import uninstall_paged_sdpa

        try:
            for seq in list(self.scheduler.running):
                self.scheduler.running.remove(seq)
                self.backend.release(seq)
            self.backend.close()
        finally:
            uninstall_paged_sdpa(self.sdpa_module)
            self.sdpa_module = None


def _slabscope_version() -> str:
    try:
        from importlib.metadata import version

        return version("slabscope")
    except Exception:  # not installed as a distribution (running from a checkout)
        return "0+checkout"


def make_backend(spec: RunSpec, loaded, pool_params: dict, *, kernel_route=None, routable: bool = False):
    """The KV backend the spec asks for: a PagedKVPool of the named design (with the fused-decode decisions
    and ``kernel_route``, already started), or mlx-lm's dense caches."""
    if spec.backend == "dense":
        return DenseBackend(loaded.num_layers)
    from pool.device_limits import device_limits
    from pool.limits import check_first_allocation
    from pool.pool import PagedKVPool
    from pool.prefix_cache import PrefixCache
    from pool.storage_base import DTYPES

    from app.workloads.fused_attention import DecodeDecisions

    limits = device_limits()  # a slab the device cannot hold is refused here, before anything runs
    check_first_allocation(loaded.num_layers, spec.backend, pool_params["block_size"], pool_params["slab_blocks"],
                           loaded.n_kv_heads, loaded.head_dim, DTYPES[loaded.dtype].size, limits)
    pool = PagedKVPool(spec.pool_config(loaded.num_layers, pool_params), limits=limits)
    pool.gather_meter.measuring = spec.measure_gathers
    prefix = PrefixCache(pool, pool_params["block_size"]) if pool_params.get("prefix_cache") else None
    align = math.lcm(pool_params["block_size"], pool_params.get("prefill_chunk", pool_params["block_size"]))
    if kernel_route is not None:
        kernel_route.bind(dtype=loaded.dtype, head_dim=loaded.head_dim, n_q_heads=_query_heads(loaded),
                          n_kv_heads=loaded.n_kv_heads, block_size=pool_params["block_size"])
    decisions = DecodeDecisions(pool, dtype=loaded.dtype, head_dim=loaded.head_dim,
                                routable=routable and kernel_route is not None,
                                readiness=kernel_route.readiness() if kernel_route is not None else None)
    return PagedBackend(pool, prefix_cache=prefix, align_tokens=align, decisions=decisions, kernel=kernel_route,
                        reserve_ahead=spec.reserves_ahead(), prefill_routable=routable)


def _query_heads(loaded) -> int:
    args = getattr(loaded.model, "args", None)
    return int(getattr(args, "num_attention_heads", loaded.n_kv_heads))


def build_session(spec: RunSpec, scenario: Scenario, *, loaded=None, logits_hook=None,
                  temperature: float = 0.0, top_p: float = 0.0, kernel_route=None, on_stage=None) -> WorkloadSession:
    """Load the model (unless given), build backend, scheduler, engine and prompt source. Paged backends
    register the fused kernels (``kernel_route``: a ``KernelRoute``, default the real ones) and install the paged
    SDPA in the model's module; ``WorkloadSession.close`` restores it. ``on_stage(name)`` is told when the
    load-time rehearsal starts (a user waiting on the run sees it)."""
    pool_params = resolved_pool_params(spec, scenario.pool)
    if loaded is None:
        from app.models import load_model

        loaded = load_model(spec.model, dtype=spec.dtype, device=spec.device, seed=spec.seed)
    check_fits_context(scenario, loaded.max_positions, loaded.name)
    import mlx.core as mx

    from app.workloads.rehearsal import runs_on_gpu

    pool_params["prefill_batch_tokens"] = prefill_batch_tokens_for(pool_params, runs_on_gpu(spec.device))
    mx.random.seed(spec.seed)
    if spec.cache_limit is not None:  # process-wide; every backend's worker applies it the same way
        mx.set_cache_limit(spec.cache_limit)
    sdpa_module = None
    if spec.backend != "dense":
        from app.workloads.fused_attention import KernelRoute, install_paged_sdpa

        kernel_route = (kernel_route or KernelRoute()).start()
        sdpa_module = install_paged_sdpa(loaded.model)
    sampler = make_sampler(temperature, top_p)
    try:
        backend = make_backend(spec, loaded, pool_params, kernel_route=kernel_route,
                               routable=sdpa_module is not None)
        rehearsal = _rehearse(spec, scenario, loaded, pool_params, sampler, kernel_route=kernel_route,
                              routable=sdpa_module is not None, on_stage=on_stage)
    except BaseException:  # e.g. a slab the device cannot hold, a failing rehearsal: leave the model as it was
        from app.workloads.fused_attention import uninstall_paged_sdpa

        uninstall_paged_sdpa(sdpa_module)
        raise
    mx.random.seed(spec.seed)  # a sampling rehearsal drew random numbers: the run's draws start where they did
    scheduler = Scheduler(prefill_chunk=pool_params["prefill_chunk"], admit_fn=backend.admit,
                          release_fn=backend.release, prefill_batch_tokens=pool_params["prefill_batch_tokens"])
    from app.workloads.cache_trim import CacheTrim, kv_bytes_per_token

    trim = CacheTrim(weight_bytes=loaded.weight_bytes, bytes_per_token=kv_bytes_per_token(loaded),
                     fraction=spec.trim_fraction())
    engine = Engine(loaded.model, backend, scheduler, sampler=sampler, logits_hook=logits_hook, cache_trim=trim,
                    inflight_bound=_inflight_bound(spec, loaded))
    session = WorkloadSession(spec, scenario, loaded, backend, scheduler, engine, make_source(loaded, spec.seed),
                              pool_params)
    session.sdpa_module = sdpa_module
    session.rehearsal = rehearsal
    return session


def _rehearse(spec: RunSpec, scenario: Scenario, loaded, pool_params: dict, sampler, *, kernel_route,
              routable: bool, on_stage=None):
    """The load-time rehearsal (``app/workloads/rehearsal.py``) on a throwaway backend, scheduler and engine of
    the run's kind, one batch per request phase; its ``RehearsalReport``, or None when it does not run (a CPU device,
    $SLABSCOPE_REHEARSAL=0, no request phase). The throwaway objects die with this call (reference counting: nothing
    of them may sit in a cycle, or their pool, as large as the run's, stays allocated until Python's collector runs:
    11 GiB of a 24 GiB footprint on the H200, tests/workloads/test_rehearsal.py), then MLX's cache is emptied."""
    from app.workloads import rehearsal

    if not rehearsal.wants_rehearsal(spec.device):
        return None
    batches = rehearsal.rehearsal_batches(scenario, loaded, spec.seed)
    if not batches:
        return None
    if on_stage is not None:
        on_stage("rehearsal", f"{len(batches)} batch{'es' if len(batches) > 1 else ''}")
    report = _rehearse_on_throwaway(spec, loaded, pool_params, sampler, batches, kernel_route, routable)
    _collect_on_a_gpu()
    rehearsal.clear_after_rehearsal()
    return report


def _collect_on_a_gpu() -> None:
    """On a GPU device, one collection after the rehearsal, besides reference counting: the H200 figures with the
    rehearsal's pool freed were taken with it (docs/gpu.md), and a cycle not yet found would hold device memory.
    Not on a CPU (where a rehearsal runs only when tests force it): there a full collection moved MLX's allocator
    noise into later growth windows of the tests."""
    import gc

    import mlx.core as mx

    if mx.default_device().type == mx.DeviceType.gpu:
        gc.collect()


def _rehearse_on_throwaway(spec: RunSpec, loaded, pool_params: dict, sampler, batches, kernel_route,
                           routable: bool):
    from app.workloads.rehearsal import rehearse

    backend = make_backend(spec, loaded, pool_params, kernel_route=kernel_route, routable=routable)
    scheduler = Scheduler(prefill_chunk=pool_params["prefill_chunk"], admit_fn=backend.admit,
                          release_fn=backend.release, prefill_batch_tokens=pool_params["prefill_batch_tokens"])
    engine = Engine(loaded.model, backend, scheduler, sampler=sampler, inflight_bound=_inflight_bound(spec, loaded))
    return rehearse(engine, batches, kv_heads=loaded.n_kv_heads, head_dim=loaded.head_dim, dtype=loaded.dtype)


def _inflight_bound(spec: RunSpec, loaded):
    """The run's prefill in-flight bound (app/workloads/inflight_bound.py): the run's and its rehearsal's alike, so
    the rehearsal's peak is bounded like the run's."""
    from app.workloads.inflight_bound import InflightBound

    return InflightBound(weight_bytes=loaded.weight_bytes, allowance=spec.prefill_inflight)
