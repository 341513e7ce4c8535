"""Memory sampling and footprint accounting (worker side; mlx is imported only when a sampler is built).

One sample is a ``probes.events.Sample`` record. Memory figures are bytes:

    active        MLX active memory (mx.get_active_memory)
    cache         MLX buffer cache (mx.get_cache_memory): freed buffers MLX keeps; part of the real footprint
    footprint     active + cache, the figure we report (MLX's own peak counter misses the cache)
    peak          MLX peak *active* memory, max since start (pool.copy_meter.peak_memory: MLX's counter,
                  corrected for the resets the pool's copy meter makes); labelled as such in the UI
    footprint_max max of sampled footprint since start ("max since start"; windows are computed by readers)
    rss, rss_max  process resident set size (psutil), and its sampled max since start
    sys_available system available memory (psutil)
Accounting (signed: a negative remainder is shown, never clamped, because it means memory was counted twice or
is not resident):
    weights       model weight bytes (given by the workload)
    pool_live     pool bytes in use now, pool_free = bytes reserved - bytes in use, pool_slabs = slabs (monolithic:
                  32-block chunks) over layers: the counters the pool keeps current at every row change
                  (PagedKVPool.live_bytes / reserved_bytes / slab_count), read at this sample, not at the last
                  snapshot (0 without a pool: the dense backend)
    other_active  active - weights - pool reserved bytes (activations, logits, temporaries)
    rss_other     rss - (active + cache): RSS not explained by MLX (interpreter, libraries, tokenizer, ...) on
                  unified memory (CPU, Metal); on a discrete CUDA GPU MLX's memory is device memory outside RSS, so
                  rss_other is the whole host RSS there (never a difference of two different memories)
    cost_us       what taking this sample cost, measured inline (microseconds of the sampling thread's CPU time:
                  what it takes from the workload, which waits while the sampler holds the GIL; its wall time also
                  counts waiting for the workload to hand the GIL back after the RSS read, which is the workload
                  running, and grew with the workload's host work per step: 380 us at 403 slabs on the H200)

Cost (what one sample reads; ``slabscope bench probes`` measures the effect on throughput): three MLX counter
reads (no device synchronisation: they read the allocator's counters), RSS from ``/proc/self/statm`` through a
descriptor kept open (one ``pread``, ~3 us of CPU: lab/probe_cost/rss_read.py; psutil's ``memory_info`` costs ~20
us), and the system's available memory at most once per ``SYS_AVAILABLE_PERIOD_S`` (psutil parses /proc/meminfo,
~50 us; between reads a sample carries the last value). At 100 Hz that is ~10 us per sample instead of ~75 us,
taken on the workload thread at a step boundary (the probe thread samples only a stalled workload: probes/live.py),
so a sample holds the workload's host-bound decode loop for exactly that long.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from probes.events import Sample

SAMPLE_FIELDS = Sample.__struct_fields__
SYS_AVAILABLE_PERIOD_S = 1.0  # system-wide available memory changes slowly; reading it costs ~50 us


class _Rss:
    """This process's resident set size: one pread of /proc/self/statm (Linux), else psutil's memory_info."""

    def __init__(self, process) -> None:
        self._process = process
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        try:
            self._fd: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = None

    def __call__(self) -> int:
        if self._fd is not None:
            try:
                return int(os.pread(self._fd, 128, 0).split()[1]) * self._page
            except (OSError, ValueError, IndexError):
                self._fd = None
        return self._process.memory_info().rss

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class MemorySampler:
    """Reads MLX and process memory; owns the running maxima since start. Not thread-safe: one thread samples.

    ``pool``: the attached pool (:meth:`attach_pool`), whose byte counters every sample reads. They are plain ints
    the workload thread keeps current; reading them from the probe thread needs no lock (a read inside a pool
    operation may see it half done: at most one step stale).
    """

    def __init__(self, weight_bytes: int = 0) -> None:
        import mlx.core as mx
        import psutil

        from pool.copy_meter import peak_memory
        from probes.meta import device_memory_model

        self._mx = mx
        self._peak_memory = peak_memory
        self._psutil = psutil
        self._proc = psutil.Process()
        self._rss = _Rss(self._proc)
        self._available = 0
        self._available_due = 0.0  # monotonic time of the next system-memory read
        self.weight_bytes = int(weight_bytes)
        self.discrete = device_memory_model() == "discrete"
        self.pool = None
        self.footprint_max = 0
        self.rss_max = 0
        self.num_samples = 0
        self.total_cost_s = 0.0

    def attach_pool(self, pool) -> None:
        """Read ``pool``'s bytes now (``PagedKVPool.bytes_now``: live, reserved, slabs) in every sample from now on."""
        self.pool = pool

    def _pool_bytes(self) -> tuple[int, int, int]:
        pool = self.pool
        if pool is None:
            return 0, 0, 0
        now = pool.bytes_now()
        return now.live, now.reserved, now.slabs

    def sample(self, step: int, tokens: int) -> Sample:
        """Take one sample now; updates the running maxima and cost totals."""
        start = time.thread_time()  # CPU time of this thread: see cost_us in the module docstring
        mx = self._mx
        active = mx.get_active_memory()
        cache = mx.get_cache_memory()
        peak = self._peak_memory()
        rss = self._rss()
        t = time.monotonic()
        if t >= self._available_due:
            self._available = self._psutil.virtual_memory().available
            self._available_due = t + SYS_AVAILABLE_PERIOD_S
        available = self._available
        footprint = active + cache
        self.footprint_max = max(self.footprint_max, footprint)
        self.rss_max = max(self.rss_max, rss)
        in_use, reserved, slabs = self._pool_bytes()
        cost = time.thread_time() - start
        self.num_samples += 1
        self.total_cost_s += cost
        return Sample(
            t=t, step=step, tokens=tokens, active=active, cache=cache, footprint=footprint, peak=peak,
            footprint_max=self.footprint_max, rss=rss, rss_max=self.rss_max, sys_available=available,
            weights=self.weight_bytes, pool_live=in_use, pool_free=reserved - in_use,
            other_active=active - self.weight_bytes - reserved, rss_other=rss if self.discrete else rss - footprint,
            cost_us=round(cost * 1e6, 1), pool_slabs=slabs)


class AccountingPart(NamedTuple):
    label: str
    bytes: float


FOOTPRINT_PARTS = ("weights", "pool live", "pool reserved-free", "other active", "MLX cache")


def accounting_parts(sample: Sample, discrete: bool = False) -> list[AccountingPart]:
    """The footprint split of one sample in display order: the first five parts sum to ``footprint``; the last is
    the RSS MLX does not explain (unified memory), or on a discrete GPU the host RSS on its own (not part of the
    device footprint; sessions recorded before the sampler knew that stored ``rss - footprint`` there, so the host
    RSS is taken from ``rss`` itself). Signed, never clamped."""
    last = "host RSS (not on GPU)" if discrete else "unexplained RSS"
    rest = sample.rss if discrete else sample.rss_other
    values = (sample.weights, sample.pool_live, sample.pool_free, sample.other_active, sample.cache, rest)
    return [AccountingPart(label, float(value)) for label, value in zip((*FOOTPRINT_PARTS, last), values)]
