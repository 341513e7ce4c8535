"""The storage half of a shrink: execute the bookkeeping's ``ShrinkPlan`` on storage, then hand freed buffers back
to the system (imports mlx; ``PagedKVPool.shrink`` loads it lazily).

Order: the block moves (``RowStorage.move_rows``: one staged copy per moved block and layer, measured), then the
release (``RowStorage.release``: slabs dropped, or the monolithic tensor reallocated smaller and copied, measured), then
a trim of MLX's buffer cache (``mx.clear_cache``): a dropped slab's buffer goes to MLX's cache first, and only a trim
returns it to the system, so without it the footprint (active + cache) would not fall. A trim waits for the work in
flight (freeing device memory synchronises), so it runs within a budget (``CacheRelease``): only when the cache
holds at least ``min_bytes``, and at most once per ``interval_s``; a release whose trim that interval held back
is trimmed at the first shrink point after it. MLX's active + cache is read before and after (the device
synchronised each time), so the report says what the footprint really fell by.
"""

from __future__ import annotations

import time

import mlx.core as mx

from pool.book_shrink import ShrinkPlan
from pool.config import chunk_rows
from pool.shrink_types import ShrinkReport

TRIM_MIN_BYTES = 1 << 20   # below this the cache is not worth a synchronisation
TRIM_INTERVAL_S = 0.25     # at most four trims a second


class CacheRelease:
    """Owns the trim budget's state (when the last trim ran, whether a release still waits for one)."""

    def __init__(self, min_bytes: int = TRIM_MIN_BYTES, interval_s: float = TRIM_INTERVAL_S) -> None:
        self.min_bytes = min_bytes
        self.interval_s = interval_s
        self.pending = False
        self._last = float("-inf")
        self.trims = 0

    def after(self, released: bool) -> tuple[int, float]:
        """Trim MLX's cache if a release (now or held back earlier) is waiting and the budget allows it. Returns
        (bytes handed back, seconds spent)."""
        self.pending = self.pending or released
        now = time.perf_counter()
        if not self.pending or now - self._last < self.interval_s:
            return 0, 0.0
        self.pending = False
        cached = mx.get_cache_memory()
        if cached < self.min_bytes:
            return 0, 0.0
        mx.clear_cache()
        self._last = time.perf_counter()
        self.trims += 1
        return cached - mx.get_cache_memory(), self._last - now


def execute_shrink(storage, plan: ShrinkPlan, book, cache: CacheRelease) -> ShrinkReport:
    """Run ``plan`` on ``storage``, in every layer (before the first write storage holds nothing: only the
    bookkeeping changed), then the cache trim. Returns what it did and measured, counted over layers like the
    bookkeeping's counters; mutates storage and ``cache``."""
    layers, bpr = book.num_layers, book.bytes_per_row
    before = _footprint()
    t0 = time.perf_counter()
    moved = storage.move_rows(plan.moves) if storage.initialised else 0
    t1 = time.perf_counter()
    copied = storage.release(plan.capacity) if storage.initialised and plan.released else 0
    t2 = time.perf_counter()
    trimmed, trim_s = cache.after(plan.released)
    count = len(plan.moves) * layers
    rows = (plan.old_capacity - plan.capacity) * layers
    return ShrinkReport(blocks_moved=count, bytes_moved=moved + copied,
                        bytes_moved_model=(count + plan.copied_rows * layers) * bpr,
                        slabs_released=rows // chunk_rows(book.design, book.slab_blocks),
                        bytes_released=rows * bpr, trimmed_bytes=trimmed, move_s=t1 - t0,
                        release_s=t2 - t1, trim_s=trim_s, declined=plan.declined, footprint_before=before,
                        footprint_after=_footprint())


def _footprint() -> int:
    """MLX's active + cache once the device is idle (a dropped slab a pending graph still reads is freed then)."""
    mx.synchronize()
    return mx.get_active_memory() + mx.get_cache_memory()
