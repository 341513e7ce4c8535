"""Monolithic storage: the design slab storage replaces, kept as the profiler's "before" baseline.

One K and one V tensor per layer. Growth (in chunks of 32 blocks, rounded by the bookkeeping) allocates a larger
tensor, copies the old contents in, evaluates it, and drops the old one: O(pool) bytes copied per growth, and on
GPU backends each freed old tensor stays in MLX's buffer cache as one rung of a ladder of ever-larger sizes. The
copies are measured from the allocator (``pool/copy_meter.py``): a checkpoint after each tensor charges its old
contents, so the figure is their sum (a window charges its peak, and the old K is freed before V grows).

Shrinking this design (pool/shrink_types.py) is the same move in reverse: allocate smaller and copy the kept rows,
K then V, each measured as the bytes MLX allocates for it (the smaller tensor: the kept rows' copy).
"""

from __future__ import annotations

import mlx.core as mx

from pool.config import MONOLITHIC_CHUNK_BLOCKS
from pool.copy_meter import allocated_during
from pool.storage_base import RowStorage


class MonolithicStorage(RowStorage):
    design = "monolithic"

    def _slab_for_row(self, row: int) -> tuple[int, int]:
        """Every row lives in the single tensor: (0, row)."""
        return 0, row

    def layer_capacity(self, layer: int) -> int:
        return self.keys[layer][0].shape[0] if self.keys[layer] else 0

    def ensure_rows(self, layer: int, rows: int) -> None:
        """Grow to ``rows`` rows by allocate-larger-and-copy. K then V: each new tensor is evaluated before the old
        one is dropped, so a growth holds at most one tensor's old+new pair of one layer at a time."""
        old_rows = self.layer_capacity(layer)
        if rows <= old_rows:
            return
        for tensors in (self.keys[layer], self.values[layer]):
            grown = self._zeros(rows)
            if old_rows:
                grown[:old_rows] = tensors[0]
            mx.eval(grown)
            if tensors:
                tensors[0] = grown
            else:
                tensors.append(grown)
            self._allocated()
        self.touch(layer, [0])
        self.grow_events += 1  # bytes_copied is charged by the copy window at each _allocated() above

    def release_rows(self, layer: int, rows: int) -> int:
        """Allocate-smaller-and-copy: the tensor keeps rows ``[0, rows)``, K then V (each evaluated before the old
        one is dropped, so one old+new pair at a time). Returns the bytes MLX allocated for the copies (measured,
        ``allocated_during``: the smaller tensors)."""
        old_rows = self.layer_capacity(layer)
        if rows >= old_rows:
            return 0
        allocated = 0
        start = mx.array([0])
        for tensors in (self.keys[layer], self.values[layer]):
            if rows == 0:
                tensors.clear()
                continue
            smaller, nbytes = self._kept_prefix(tensors[0], rows, start)
            tensors[0] = smaller
            allocated += nbytes
            self._allocated()
        self.touch(layer, [0])
        self.slab_releases += (old_rows - rows) // MONOLITHIC_CHUNK_BLOCKS
        return allocated

    def _kept_prefix(self, old: mx.array, rows: int, start: mx.array) -> tuple[mx.array, int]:
        """Rows ``[0, rows)`` of ``old`` in a fresh buffer (a plain slice, or assigning one whole, is a view that
        keeps the old buffer alive), evaluated; and the bytes MLX allocated for it."""
        (smaller,), nbytes = allocated_during(
            lambda: [mx.slice_update(self._zeros(rows), old[:rows], start, axes=(0,))], [old, start])
        return smaller, nbytes
