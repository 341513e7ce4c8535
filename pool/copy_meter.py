"""Copies measured from MLX's allocator, not modelled: what a storage operation allocated beyond what it kept.

A window opens after everything pending on the storage's tensors has been evaluated and the device has
synchronised (so in-flight work can neither allocate nor free inside it), records MLX's active memory and the
bytes the storage's tensors hold, and resets MLX's peak counter. At a checkpoint (after the operation's
allocations are evaluated and synchronised) it charges

    copied += peak - max(active after, active before + growth of the storage's own tensors)

i.e. the bytes MLX allocated in the window beyond what the storage kept as new capacity: the old contents of a
tensor re-allocated larger (monolithic growth), a slab re-copied by a lazy rewrite, a copy-on-write's staging
block. Without interference both terms of the max agree (``before + growth == after``). The max keeps the charge
exact when MLX serves a *kept* allocation from a cached buffer a little larger than asked (its buffer cache reuses
a buffer up to twice the size, at most two pages more: that slack stays held, so ``after`` exceeds
``before + growth`` by it), and never larger than ``peak - before - growth`` if unrelated memory is freed inside
the window. Slack on a *transient* buffer (a staging block served from a larger cached one) is allocated and freed
like the rest and is charged: the figure is what the allocator handed out.

A window charges its *peak*, so sequential copies that each free their source would show only the largest. Two
rules make the charge their sum: an operation with several eager copies checkpoints after each one (monolithic
growth: after each tensor), and at a checkpoint every tensor the operation *replaced* (a new array at an existing
list position, such as a lazy rewrite of a slab) is evaluated and measured on its own.

Not counted: a rewrite MLX performs in place (donating the old buffer: it costs time, not memory), a copy between
existing buffers that allocates nothing, and a copy whose source is kept alive too (held memory, not a transient:
it shows in the footprint, and as a capacity mismatch in ``check_integrity``).

MLX's peak counter is process-global and the window resets it; :func:`peak_memory` is the corrected reading every
slabscope figure uses ("peak since start": the max of what the counter showed before each reset and its current
value). Cost: two device synchronisations per measured operation, plus one per replaced tensor (growth and
copy-on-write are rare: at most one each per pool operation that adds capacity or copies a shared block; a decode
step that stays inside its blocks measures nothing).
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


def begin_peak_window() -> None:
    """Start a window whose own peak ``mx.get_peak_memory()`` reads from now on (the load-time rehearsal measures
    itself this way) without losing the process's peak: :func:`peak_memory` keeps what came before."""
    _reset_for_window()


def _reset_for_window() -> None:
    global _peak_floor
    _peak_floor = max(_peak_floor, mx.get_peak_memory())  # raised before the reset: readers never see it drop
    mx.reset_peak_memory()


def _settle(tensors: list) -> None:
    if tensors:
        mx.eval(tensors)
    mx.synchronize()


class CopyWindow:
    """One measured operation on a storage. ``tensor_lists()`` returns the storage's tensor lists of the layers
    involved (per layer its K list and its V list; read again at each checkpoint, so replaced tensors are seen).
    Owns ``copied`` (bytes, summed over checkpoints)."""

    def __init__(self, tensor_lists: Callable[[], list[list]]) -> None:
        self._lists = tensor_lists
        self.copied = 0
        self._before = 0
        self._held = 0
        self._ids: list[list[int]] = []
        self._sizes: list[list[int]] = []
        lists = tensor_lists()
        _settle([t for tensors in lists for t in tensors])
        self._open(lists)

    def _open(self, lists: list[list]) -> None:
        self._ids = [[id(t) for t in tensors] for tensors in lists]
        self._sizes = [[t.nbytes for t in tensors] for tensors in lists]
        self._held = sum(map(sum, self._sizes))
        _reset_for_window()
        self._before = mx.get_active_memory()

    def checkpoint(self) -> int:
        """Evaluate everything the operation left pending, charge what was allocated beyond the storage's own
        growth since the last checkpoint, and reopen. Returns the bytes charged by this checkpoint.

        Tensors the operation *replaced* (a new array at an existing list position) are evaluated one at a time,
        each measured on its own: evaluated together, a series of lazy copies that each free their source would
        show only the largest of them at the peak."""
        lists = self._lists()
        replaced = self._replaced(lists)
        skip = {id(t) for t, _ in replaced}
        _settle([t for tensors in lists for t in tensors if id(t) not in skip])
        peak = max(mx.get_peak_memory(), self._before)  # eager work and the group's evaluation
        charged = sum(_one_tensor(t, old_bytes) for t, old_bytes in replaced)
        after = mx.get_active_memory()
        grown = sum(t.nbytes for tensors in lists for t in tensors) - self._held
        charged += max(0, peak - max(after, self._before + grown))
        self.copied += charged
        self._open(lists)
        return charged

    def _replaced(self, lists: list[list]) -> list[tuple]:
        """(tensor, bytes of the tensor it replaced) for every list position whose array changed since the last
        open (appended positions are new capacity, not replacements)."""
        return [(t, sizes[j]) for tensors, ids, sizes in zip(lists, self._ids, self._sizes)
                for j, t in enumerate(tensors[:len(ids)]) if id(t) != ids[j]]


def _one_tensor(tensor, old_bytes: int) -> int:
    """Evaluate one replacing tensor alone; the bytes it allocated beyond its own growth over what it replaced."""
    _reset_for_window()
    before = mx.get_active_memory()
    _settle([tensor])
    after = mx.get_active_memory()
    peak = max(mx.get_peak_memory(), before, after)
    return max(0, peak - max(after, before + tensor.nbytes - old_bytes))


def allocated_during(work: Callable[[], object], settle: list) -> tuple[object, int]:
    """Run ``work()`` and evaluate what it returns (a list of arrays); return (result, bytes MLX allocated
    meanwhile, the returned arrays included). ``settle``: arrays to finish first (so their pending work is not
    charged). For reads such as a gather, whose returned copy *is* the cost. As in :class:`CopyWindow`, slack MLX
    adds when it serves a result from a larger cached buffer (held beyond the results' own bytes) is not charged."""
    _settle(settle)
    _reset_for_window()
    before = mx.get_active_memory()
    result = work()
    mx.eval(result)
    mx.synchronize()
    after = mx.get_active_memory()
    peak = max(mx.get_peak_memory(), before, after)
    slack = max(0, after - before - sum(array.nbytes for array in result))
    return result, peak - before - slack
