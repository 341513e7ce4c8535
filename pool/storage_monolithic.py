"""Monolithic storage: the design slab storage replaces, kept as the profiler's "before" baseline.

One K and one V tensor per layer. Growth (in chunks of 32 blocks, rounded by the bookkeeping) allocates a larger
tensor, copies the old contents in, evaluates it, and drops the old one: O(pool) bytes copied per growth, and on
GPU backends each freed old tensor stays in MLX's buffer cache as one rung of a ladder of ever-larger sizes. The
copies are measured from the allocator (``pool/copy_meter.py``): a checkpoint after each tensor charges its old
contents, so the figure is their sum (a window charges its peak, and the old K is freed before V grows).
"""

from __future__ import annotations

import mlx.core as mx

from pool.storage_base import RowStorage


class MonolithicStorage(RowStorage):
    design = "monolithic"

    def _slab_for_row(self, row: int) -> tuple[int, int]:
        """Every row lives in the single tensor: (0, row)."""
        return 0, row

    def capacity_rows(self, layer: int) -> int:
        return self.keys[layer][0].shape[0] if self.keys[layer] else 0

    def ensure_rows(self, layer: int, rows: int) -> None:
        """Grow to ``rows`` rows by allocate-larger-and-copy. K then V: each new tensor is evaluated before the old
        one is dropped, so a growth holds at most one tensor's old+new pair of one layer at a time."""
        old_rows = self.capacity_rows(layer)
        if rows <= old_rows:
            return
        for tensors in (self.keys[layer], self.values[layer]):
            grown = self._zeros(layer, rows)
            if old_rows:
                grown[:old_rows] = tensors[0]
            mx.eval(grown)
            if tensors:
                tensors[0] = grown
            else:
                tensors.append(grown)
            self._allocated()
        self.grow_events += 1  # bytes_copied is charged by the copy window at each _allocated() above
