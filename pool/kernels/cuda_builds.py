"""Builds of the CUDA kernel variants: compiled off the decode path, kept on disk, ready before the pool needs them.

``KernelBuilds`` owns this process's compiled variants (``cuda_variants.CudaVariant`` -> name and cubin) and one
background build thread. A variant comes from the disk cache (``kernel_cache.py``) when present, else from NVRTC
(``nvrtc.py``), and is stored there for the next process. The decode path never waits for it:

* ``pending_reason(geometry, num_slabs)`` (the fused decision's readiness probe) returns None when every variant a
  launch over ``num_slabs`` slabs may need is loaded, else ``"kernel for N slabs compiling"`` (or why it failed);
  it also queues those variants first and the next bucket's (``num_slabs + 1``) after them.
* ``prefetch(geometry, num_slabs)`` queues the current and next bucket's variants at low priority; the workload
  calls it whenever the pool may have grown (each prefill chunk), so by the time decode asks, the kernels are
  usually built.
* ``binary(variant)`` is the blocking form for direct callers (tests, ``bench decode``): it waits for a queued
  build or builds in the caller's thread.

``process_builds()`` is the process-wide instance for the CUDA device MLX runs on, or None when NVRTC cannot be
loaded (``fallback_reason()`` says why) or ``SLABSCOPE_CUDA_BUILD=mlx`` asks for MLX's own ``cuda_kernel`` JIT.
Nothing here imports mlx except ``device_sm``.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from pool.kernels.cuda_variants import CudaVariant, KernelGeometry, source
from pool.kernels.kernel_cache import KernelCache
from pool.kernels.nvrtc import CompileResult, NvrtcError, load_nvrtc
from pool.kernels.plan import slab_bucket
from pool.kernels.slab_table import table_route

BUILD_ENV = "SLABSCOPE_CUDA_BUILD"      # "nvrtc" (default) | "mlx": MLX's cuda_kernel JIT (the fallback)
OPTIONS = ("--ptxas-options=-v",)       # the log then reports registers and spills (kept in ``Built.log``)
URGENT, PREFETCH = 0, 1                 # build-queue priorities
MAX_WORKERS = 4                         # build threads (NVRTC releases the GIL; one variant takes ~0.15 s)


@dataclass
class Built:
    """One variant's build state. ``origin``: "disk" | "nvrtc" once ready."""

    status: str = "queued"              # queued | compiling | ready | failed
    priority: int = PREFETCH + 1        # best priority it was queued at
    name: str = ""
    binary: bytes = b""
    origin: str = ""
    seconds: float = 0.0
    error: str = ""
    log: str = ""


Compiler = Callable[[str, int], CompileResult]  # (source, sm) -> result


class KernelBuilds:
    """See the module docstring. ``compiler`` defaults to the loaded NVRTC; tests pass one that waits on an event
    to hold a variant in "compiling" (emulated readiness). Thread-safe."""

    def __init__(self, sm: int, *, cache: KernelCache | None = None, compiler: Compiler | None = None,
                 nvrtc=None):
        self.sm = int(sm)
        self.cache = cache or KernelCache()
        self._nvrtc = nvrtc
        if compiler is None:
            self._nvrtc = self._nvrtc or load_nvrtc()
            compiler = lambda src, sm: self._nvrtc.compile(src, sm=sm, options=OPTIONS)  # noqa: E731
        self._compiler = compiler
        version = self._nvrtc.version if self._nvrtc is not None else (0, 0)
        self._target = self._nvrtc.target_for(self.sm) if self._nvrtc is not None else (f"sm_{self.sm}", "cubin")
        self._version = version
        self._cond = threading.Condition()
        self._states: dict[CudaVariant, Built] = {}
        self._heap: list[tuple[int, int, int, CudaVariant]] = []  # (priority, -bucket, order, variant)
        self._order = itertools.count()
        self._threads: list[threading.Thread] = []
        self._workers = max(1, min(MAX_WORKERS, os.cpu_count() or 1))
        self._largest: dict[KernelGeometry, int] = {}  # most slabs asked about per geometry (prefetch horizon)
        self._loaded: dict[CudaVariant, tuple[str, bytes]] = {}  # ready variants: read without the lock
        self._ready: set[tuple[KernelGeometry, int]] = set()  # (geometry, num_slabs) ready: the fast path

    # ---- queries ---------------------------------------------------------------------------------------------
    @staticmethod
    def geometry_for(*, dtype: str, head_dim: int, n_q_heads: int, n_kv_heads: int,
                     block_size: int) -> KernelGeometry | None:
        """The kernel geometry of a run, or None when the kernel cannot run it (nothing to build)."""
        from pool.kernels.paged_decode_cuda import MAX_SLABS, kernel_geometry
        from pool.kernels.plan import unsupported_reason

        if unsupported_reason(dtype=dtype, head_dim=head_dim, n_q_heads=n_q_heads, n_kv_heads=n_kv_heads,
                              block_size=block_size, num_slabs=1, max_slabs=MAX_SLABS):
            return None
        return kernel_geometry(dtype, head_dim, n_q_heads, n_kv_heads, block_size)

    def status(self, variant: CudaVariant) -> str:
        with self._cond:
            state = self._states.get(variant)
            return state.status if state else "absent"

    def pending_reason(self, geometry: KernelGeometry, num_slabs: int) -> str | None:
        """None when a launch over ``num_slabs`` slabs can run now, else why not (and its variants are queued
        first, the next bucket's after them)."""
        if (geometry, num_slabs) in self._ready:  # asked per layer per decode step: no lock once built
            return None
        self._note(geometry, num_slabs)
        table = table_route()  # the table route's variants serve every slab count: nothing to build ahead
        variants = geometry.launch_variants(num_slabs, table)
        self.request(variants, URGENT)
        if not table:
            self.request(geometry.variants(slab_bucket(num_slabs + 1)), PREFETCH)
        with self._cond:
            states = [self._states[v] for v in variants]
        failed = [s for s in states if s.status == "failed"]
        if failed:
            return (f"kernel for {num_slabs} slab{'s' if num_slabs != 1 else ''} failed to build: "
                    f"{failed[0].error.splitlines()[0]}")
        if all(s.status == "ready" for s in states):
            self._ready.add((geometry, num_slabs))
            return None
        return f"kernel for {num_slabs} slab{'s' if num_slabs != 1 else ''} compiling"

    def prefetch(self, geometry: KernelGeometry, num_slabs: int, *, reached: bool = True) -> None:
        """Queue the variants of ``num_slabs`` and ``num_slabs + 1`` slabs (low priority); returns at once. Queued
        prefetches for fewer slabs than the most ever asked about are dropped when their turn comes (the pool has
        grown past them), and larger buckets build first. ``reached=False``: a projection (the slab count the
        running sequences will need), which builds ahead but does not mark smaller buckets as passed."""
        if reached:
            self._note(geometry, num_slabs)
        if table_route():
            self.request(geometry.table_variants(), PREFETCH)
            return
        self.request(geometry.variants(slab_bucket(num_slabs)) + geometry.variants(slab_bucket(num_slabs + 1)),
                     PREFETCH)

    def _note(self, geometry: KernelGeometry, num_slabs: int) -> None:
        if num_slabs > self._largest.get(geometry, 0):
            self._largest[geometry] = num_slabs

    def _obsolete(self, variant: CudaVariant) -> bool:
        """A prefetched first pass for a smaller bucket than the pool has already reached (never a table-route
        kernel: they serve every slab count)."""
        if variant.kind in ("merge", "table") or variant.num_slabs == 0:
            return False
        geometry = KernelGeometry(variant.dtype, variant.head_dim, variant.group, variant.n_kv, variant.block_size,
                                  variant.unroll)
        return variant.num_slabs < slab_bucket(max(1, self._largest.get(geometry, 1)))

    def stats(self) -> dict:
        """Counts and times of this process's builds (for run metadata and ``slabscope warmup``)."""
        with self._cond:
            states = list(self._states.values())
        ready = [s for s in states if s.status == "ready"]
        compiled = [s for s in ready if s.origin == "nvrtc"]
        return {"mode": "nvrtc", "sm": self.sm, "arch": self._target[0], "nvrtc": ".".join(map(str, self._version)),
                "cache_dir": self.cache.directory, "variants_ready": len(ready),
                "from_disk": len(ready) - len(compiled), "compiled": len(compiled),
                "compile_s": round(sum(s.seconds for s in compiled), 3),
                "failed": sum(s.status == "failed" for s in states), "cache_store_error": self.cache.store_error}

    # ---- requests --------------------------------------------------------------------------------------------
    def request(self, variants: list[CudaVariant], priority: int = PREFETCH) -> None:
        """Queue every variant not yet built or queued (a queued one is moved up to ``priority``)."""
        with self._cond:
            added = False
            for variant in variants:
                state = self._states.setdefault(variant, Built())
                if state.status != "queued" or priority >= state.priority:
                    continue  # building, built, or already queued at least this urgently
                state.priority = priority
                heapq.heappush(self._heap, (priority, -variant.num_slabs, next(self._order), variant))
                added = True
            if added:
                self._start_worker()
                self._cond.notify_all()

    def binary(self, variant: CudaVariant, timeout: float | None = None) -> tuple[str, bytes]:
        """(name, cubin) of ``variant``, building it now if needed (in this thread unless the worker already is).
        Raises NvrtcError if it cannot be built."""
        loaded = self._loaded.get(variant)  # asked at every launch preparation: the common case takes no lock
        if loaded is not None:
            return loaded
        with self._cond:
            state = self._states.get(variant)
            if state is None or state.status == "queued":
                state = self._states.setdefault(variant, Built())
                state.status = "compiling"
                mine = True
            else:
                mine = False
        if mine:
            self._build(variant, state)
        with self._cond:
            self._cond.wait_for(lambda: state.status in ("ready", "failed"), timeout)
            if state.status != "ready":
                raise NvrtcError(state.error or f"{variant.label}: still {state.status} after {timeout} s")
            return state.name, state.binary

    def warm(self, variants: list[CudaVariant]) -> list[Built]:
        """Build every variant now (from disk or NVRTC); returns their states (``slabscope warmup``)."""
        out = []
        for variant in variants:
            try:
                self.binary(variant)
            except NvrtcError:
                pass
            with self._cond:
                out.append(self._states[variant])
        return out

    # ---- building --------------------------------------------------------------------------------------------
    def _start_worker(self) -> None:
        """(Under the lock.) Start build threads up to ``_workers``; they live as long as the process (daemons)."""
        self._threads = [t for t in self._threads if t.is_alive()]
        while len(self._threads) < self._workers:
            thread = threading.Thread(target=self._work, name=f"slabscope-kernel-build-{len(self._threads)}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._heap))
                priority, _, _, variant = heapq.heappop(self._heap)
                state = self._states[variant]
                if state.status != "queued":
                    continue
                if priority == PREFETCH and self._obsolete(variant):
                    state.priority = PREFETCH + 1  # dropped; a later request queues it again
                    continue
                state.status = "compiling"
            self._build(variant, state)

    def _build(self, variant: CudaVariant, state: Built) -> None:
        """Load ``variant`` from disk or compile and store it; sets ``state`` (under the lock) and wakes waiters."""
        name, text = source(variant)
        arch, kind = self._target
        key = self.cache.key(name, arch, self._version, OPTIONS, kind)
        start = time.perf_counter()
        fields: dict = {}
        try:
            data = self.cache.load(key)
            if data is not None:
                fields = dict(binary=data, origin="disk")
            else:
                result = self._compiler(text, self.sm)
                self.cache.store(key, result.binary)
                fields = dict(binary=result.binary, origin="nvrtc", log=result.log)
            fields.update(status="ready", name=name)
        except Exception as exc:  # noqa: BLE001 - a failed build is a decline reason, never a crash of the run
            fields = dict(status="failed", error=f"{type(exc).__name__}: {exc}")
        fields["seconds"] = time.perf_counter() - start
        with self._cond:
            for field_name, value in fields.items():
                setattr(state, field_name, value)
            if state.status == "ready":
                self._loaded[variant] = (state.name, state.binary)
            self._cond.notify_all()


# ------------------------------------------------------------------------------------------------ process-wide
_PROCESS: dict[str, object] = {}
_PROCESS_LOCK = threading.Lock()


def device_sm() -> int:
    """Compute capability of MLX's CUDA device as one number (9.0 -> 90)."""
    import mlx.core as mx

    info = mx.device_info()
    return int(info["compute_capability_major"]) * 10 + int(info["compute_capability_minor"])


def process_builds(environ: dict | None = None) -> KernelBuilds | None:
    """This process's builds for MLX's CUDA device, or None for MLX's cuda_kernel JIT (see ``fallback_reason``)."""
    env = os.environ if environ is None else environ
    if env.get(BUILD_ENV, "nvrtc") == "mlx":
        return None
    with _PROCESS_LOCK:
        if "builds" not in _PROCESS:
            try:
                _PROCESS["builds"] = KernelBuilds(device_sm())
                _PROCESS["reason"] = None
            except (NvrtcError, KeyError, OSError) as exc:
                _PROCESS["builds"] = None
                _PROCESS["reason"] = str(exc)
        return _PROCESS["builds"]  # type: ignore[return-value]


def fallback_reason(environ: dict | None = None) -> str | None:
    """Why the CUDA kernel is built by MLX's cuda_kernel JIT (in the decode step that first needs each variant,
    ~2 s each, every process) instead of by us off the decode path; None when it is not."""
    env = os.environ if environ is None else environ
    if env.get(BUILD_ENV, "nvrtc") == "mlx":
        return f"MLX cuda_kernel JIT forced by {BUILD_ENV}=mlx"
    if process_builds(env) is not None:
        return None
    return f"MLX cuda_kernel JIT: {_PROCESS.get('reason')}"
