"""Copies measured from MLX's allocator, not modelled: what a storage operation allocated beyond what it kept.

A window opens after everything pending on the storage's tensors has been evaluated and the device has
synchronised (so in-flight work can neither allocate nor free inside it), records MLX's active memory and the
bytes the storage's tensors hold, and resets MLX's peak counter. At a checkpoint (after the operation's
allocations are evaluated and synchronised) it charges

    copied += peak - max(active after, active before + growth of the storage's own tensors)

i.e. the bytes MLX allocated in the window beyond what the storage kept as new capacity: the old contents of a
tensor re-allocated larger (monolithic growth), a slab re-copied by a lazy rewrite, a copy-on-write's staging
block. Without interference both terms of the max agree (``before + growth == after``); the max keeps the charge
exact when MLX serves an allocation from a cached buffer a little larger than asked (its buffer cache reuses up to
about two pages more; that slack stays held, so ``after`` exceeds ``before + growth`` by it) and never larger than
``peak - before - growth`` if unrelated memory is freed inside the window. Not counted: a rewrite MLX performs in
place (donating the old buffer: it costs time, not memory) and a copy whose source is kept alive too (that is held
memory, not a transient: it shows in the footprint, and as a capacity mismatch in ``check_integrity``). A window
charges its *peak*, so an operation with several sequential copies checkpoints after each one (monolithic growth:
after each tensor) for the charge to be their sum.

MLX's peak counter is process-global and the window resets it; :func:`peak_memory` is the corrected reading every
slabscope figure uses ("peak since start": the max of what the counter showed before each reset and its current
value). Cost: two device synchronisations per measured operation (growth and copy-on-write are rare: at most one
per pool operation that adds capacity or copies a shared block).
"""

from __future__ import annotations

from typing import Callable, Iterable

import mlx.core as mx

_peak_floor = 0  # the highest peak MLX showed before any reset by a window (plain int: read from other threads)


def peak_memory() -> int:
    """MLX's peak active memory since start (or since :func:`reset_peak_memory`), correct across window resets."""
    return max(_peak_floor, mx.get_peak_memory())


def reset_peak_memory() -> None:
    """Reset the corrected peak (benchmarks measuring one phase)."""
    global _peak_floor
    _peak_floor = 0
    mx.reset_peak_memory()


def _reset_for_window() -> None:
    global _peak_floor
    _peak_floor = max(_peak_floor, mx.get_peak_memory())  # raised before the reset: readers never see it drop
    mx.reset_peak_memory()


def _settle(tensors: list) -> None:
    if tensors:
        mx.eval(tensors)
    mx.synchronize()


class CopyWindow:
    """One measured operation. ``tensors()`` lists every tensor the storage holds for the layers involved (read
    again at each checkpoint, so replaced tensors are seen). Owns ``copied`` (bytes, summed over checkpoints)."""

    def __init__(self, tensors: Callable[[], list]) -> None:
        self._tensors = tensors
        self.copied = 0
        self._before = 0
        self._held = 0
        current = tensors()
        _settle(current)
        self._open(current)

    def _open(self, current: Iterable) -> None:
        self._held = sum(t.nbytes for t in current)
        _reset_for_window()
        self._before = mx.get_active_memory()

    def checkpoint(self) -> int:
        """Evaluate everything the operation left pending, charge what was allocated beyond the storage's own
        growth since the last checkpoint, and reopen. Returns the bytes charged by this checkpoint."""
        current = self._tensors()
        _settle(current)
        after = mx.get_active_memory()
        peak = max(mx.get_peak_memory(), self._before, after)
        grown = sum(t.nbytes for t in current) - self._held
        charged = max(0, peak - max(after, self._before + grown))
        self.copied += charged
        self._open(current)
        return charged
