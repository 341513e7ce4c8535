"""Fused paged decode in the live path: which kernel runs, the paged SDPA that routes attention to it, and the
per-step decisions (with their ``fused``/``gather`` events).

mlx-lm attention modules call ``scaled_dot_product_attention(queries, keys, values, cache=cache, scale=...,
mask=...)``, a name each model module imports from ``mlx_lm.models.base``. ``install_paged_sdpa(module)`` rebinds
that name in the model's module (refcounted, restored by ``uninstall_paged_sdpa``) to a function that sends a
decode step's attention to the fused kernel when the layer's cache is a paged cache in fused mode, and defers to
mlx-lm's own function for everything else (prefill, dense caches, gather-mode layers).

The decision is the pool's (``pool.fused_decision``: env switch, GPU backend, registered ``KernelCaps``, dtype,
head_dim, batch, slab count, context): asked once per decode step for every layer, after ``prepare_write`` so the
slab count is the one the kernel will read. This module imports mlx only through the paged cache it type-checks.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from typing import Callable

from probes.events import FusedChange

# (pool, layer, seq_ids, queries, *, scale, backend[, plan, meta[, launches]]) -> [B, Hq, 1, D]
KernelFn = Callable[..., object]


def _fused_decode(pool, layer, seq_ids, queries, *, scale, backend, plan=None, meta=None, launches=None):
    from pool.kernels.paged_decode import fused_decode

    return fused_decode(pool, layer, seq_ids, queries, scale=scale, backend=backend, plan=plan, meta=meta,
                        launches=launches)


def _register_kernels() -> list[str]:
    from pool.kernels import register_kernels

    return register_kernels()


@dataclass
class KernelRoute:
    """The fused kernel the live path calls and how kernels get registered with the pool's decision registry.

    Defaults: ``pool.kernels.register_kernels()`` (CUDA with measured thresholds; Metal when opted in) and
    ``pool.kernels.paged_decode.fused_decode`` for the backend MLX runs on. Tests substitute both (a fake kernel
    registered for a pretend backend) to exercise the routing on CPU.
    """

    run: KernelFn = _fused_decode
    register: Callable[[], list] = _register_kernels
    backend: str | None = None  # None: pool.fused_decision.detect_backend() at start
    registered: list = field(default_factory=list)
    # run takes ``plan=``/``meta=`` (a launch plan built once per step, see step_plans.py); None: only the default
    accepts_plan: bool | None = None
    # run also takes ``launches=`` (the plan's dict of prepared launches, reused by the layers it serves)
    accepts_launches: bool | None = None
    # Kernel variants built off the decode path (pool.kernels.cuda_builds.KernelBuilds: ``pending_reason`` and
    # ``prefetch``); None: the kernel needs no build step we control. Tests pass builds with emulated readiness.
    builds: object | None = None
    build_note: str | None = None  # why the kernel is built in the decode step instead (MLX's JIT fallback)
    geometry: object | None = None  # the run's kernel geometry (``bind``); None: nothing to build for this run
    # the live kernel reads slabs through the slab table (``start``): a fused layer's decode write may go through
    # it in place (pool/kernels/table_write.py)
    reads_table: bool = False

    def __post_init__(self) -> None:
        if self.accepts_plan is None:
            self.accepts_plan = self.run is _fused_decode
        if self.accepts_launches is None:
            self.accepts_launches = self.run is _fused_decode

    def start(self) -> "KernelRoute":
        """Register the kernels and fix the backend name the kernel is called with; returns self. The real CUDA
        route takes this process's kernel builds (or the reason it falls back to MLX's JIT)."""
        self.registered = list(self.register() or [])
        if self.backend is None:
            from pool.fused_decision import detect_backend

            self.backend = detect_backend()
        if self.run is _fused_decode:
            from pool.kernels.paged_decode import table_kernel

            self.reads_table = table_kernel(self.backend) is not None
        if self.builds is None and self.backend == "cuda" and self.run is _fused_decode:
            from pool.kernels.cuda_builds import fallback_reason, process_builds

            self.builds = process_builds()
            self.build_note = fallback_reason()
        return self

    def bind(self, *, dtype: str, head_dim: int, n_q_heads: int, n_kv_heads: int, block_size: int) -> None:
        """Fix the run's kernel geometry (``readiness``/``prefetch`` need it); the builds say what they can build
        (None for a geometry the kernel does not support: the decision rule declines that for its own reason)."""
        self.geometry = None if self.builds is None else self.builds.geometry_for(
            dtype=dtype, head_dim=head_dim, n_q_heads=n_q_heads, n_kv_heads=n_kv_heads, block_size=block_size)

    def readiness(self) -> Callable[[int], str | None] | None:
        """The fused decision's readiness probe for this run (num_slabs -> None or "kernel for N slabs
        compiling"); None when nothing needs building."""
        if self.builds is None or self.geometry is None:
            return None
        return functools.partial(self.builds.pending_reason, self.geometry)

    def prefetch(self, num_slabs: int, *, projected: bool = False) -> None:
        """Queue the kernels for ``num_slabs`` and ``num_slabs + 1`` slabs in the background (the pool may be
        about to append one; ``projected``: a count the running sequences will reach); returns at once."""
        if self.builds is not None and self.geometry is not None and num_slabs > 0:
            self.builds.prefetch(self.geometry, num_slabs, reached=not projected)

    def meta(self) -> dict:
        """How this run's kernels are built: NVRTC + disk cache figures, or the fallback and its reason."""
        if self.builds is not None and hasattr(self.builds, "stats"):
            return self.builds.stats()
        if self.build_note:
            return {"mode": "mlx-jit", "reason": self.build_note}
        return {"mode": "none"}


# ------------------------------------------------------------------------------------------------ paged SDPA
_INSTALLED: dict[str, tuple[object, int]] = {}  # module name -> (mlx-lm's function, install count)


def make_paged_sdpa(original: Callable) -> Callable:
    """A drop-in for mlx-lm's ``scaled_dot_product_attention`` that runs fused-mode paged caches on the kernel."""
    from app.workloads.paged_cache import PagedLayerCache

    def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None):
        if isinstance(cache, PagedLayerCache) and cache.fused:
            if sinks is not None:
                raise NotImplementedError("the fused paged-decode kernel does not support attention sinks")
            return cache.step.fused_attention(cache.layer, queries, scale)
        if isinstance(cache, PagedLayerCache) and cache.prefill_paged:
            return cache.step.prefill.attention(cache.layer, queries, keys, values, scale=scale, mask=mask,
                                                sinks=sinks, original=original)
        if sinks is None:
            return original(queries, keys, values, cache=cache, scale=scale, mask=mask)
        return original(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)

    scaled_dot_product_attention.paged_original = original
    return scaled_dot_product_attention


def install_paged_sdpa(model) -> str | None:
    """Rebind ``scaled_dot_product_attention`` in the model's module; returns the module name, or None when the
    module does not call attention through that name (then fused decode stays off for this model)."""
    name = type(model).__module__
    module = sys.modules.get(name)
    if module is None or not callable(getattr(module, "scaled_dot_product_attention", None)):
        return None
    if name in _INSTALLED:
        original, count = _INSTALLED[name]
        _INSTALLED[name] = (original, count + 1)
        return name
    original = module.scaled_dot_product_attention
    _INSTALLED[name] = (original, 1)
    module.scaled_dot_product_attention = make_paged_sdpa(original)
    return name


def uninstall_paged_sdpa(name: str | None) -> None:
    """Undo one ``install_paged_sdpa``; the last one restores mlx-lm's function."""
    if name is None or name not in _INSTALLED:
        return
    original, count = _INSTALLED[name]
    if count > 1:
        _INSTALLED[name] = (original, count - 1)
        return
    del _INSTALLED[name]
    setattr(sys.modules[name], "scaled_dot_product_attention", original)


# ------------------------------------------------------------------------------------------------ decisions
NOT_ROUTABLE = "model module does not call scaled_dot_product_attention by name"


class DecodeDecisions:
    """Owns each layer's last emitted decision; asks the pool once per decode step (one decision serves every
    layer: they hold the same slabs) and queues a ``fused`` event for every layer whose (use_fused, reason)
    changes. ``dtype``/``head_dim``: the K/V geometry (the pool's once written, else the model's)."""

    def __init__(self, pool, *, dtype: str, head_dim: int, routable: bool, readiness=None):
        self.pool = pool
        self.dtype, self.head_dim, self.routable = dtype, head_dim, routable
        self.readiness = readiness  # KernelRoute.readiness(): "kernel for N slabs compiling" until built
        self.last: dict[int, tuple[bool, str]] = {}
        self.events: list[FusedChange] = []  # not stamped yet: the runner stamps them with the step

    def decide(self, batch_size: int, context_len: int) -> list[bool]:
        """Per layer: True to run the fused kernel this step (the pool's one decision, counted for every layer in
        its decision counters)."""
        geometry = self.pool.geometry
        dtype, head_dim = (geometry.dtype, geometry.head_dim) if geometry else (self.dtype, self.head_dim)
        decision = self.pool.fused_decision(dtype=dtype, head_dim=head_dim, batch_size=batch_size,
                                            context_len=context_len, readiness=self.readiness)
        use, reason = decision.use_fused, decision.reason
        if use and not self.routable:
            use, reason = False, NOT_ROUTABLE
        num_layers = self.pool.config.num_layers
        for layer in range(num_layers):
            if self.last.get(layer) != (use, reason):
                self.last[layer] = (use, reason)
                self.events.append(FusedChange(layer=layer, use_fused=use, reason=reason))
        return [use] * num_layers
