"""Slab storage: per layer, a list of fixed-size K and V slab tensors ``[slab_blocks, H, block_size, D]``.

Growth appends zero-filled slabs and never copies or frees one, so MLX's allocator high-water mark is exactly the
live capacity and no ladder of ever-larger freed buffers accumulates in its cache. A shrink (pool/shrink_types.py)
drops the highest slabs from the lists: their buffers go back to MLX (and, trimmed, to the system) with no copy.
``bytes_copied`` is measured from the allocator (``pool/copy_meter.py``) like every design's, and reads 0 because
nothing is copied.
"""

from __future__ import annotations

from pool.storage_base import RowStorage


class SlabStorage(RowStorage):
    design = "slab"

    def _slab_for_row(self, row: int) -> tuple[int, int]:
        """The one mapping every touch point uses: physical row -> (slab index, row in slab)."""
        return divmod(row, self.slab_blocks)

    def layer_capacity(self, layer: int) -> int:
        return len(self.keys[layer]) * self.slab_blocks

    def ensure_rows(self, layer: int, rows: int) -> None:
        """Append every slab needed so rows [0, rows) exist: zero-filled, not yet evaluated. ``grow`` calls
        :meth:`materialize` once every layer is presized: one asynchronous evaluation for all layers per growth
        (an ``mx.eval`` per layer made the host wait for the device 28 times per growth,
        stalling a pipelined GPU prefill; :meth:`grow` then synchronises once to measure the growth)."""
        missing = -(-rows // self.slab_blocks) - len(self.keys[layer])
        if missing <= 0:
            return
        for _ in range(missing):
            keys = self._zeros(self.slab_blocks)
            values = self._zeros(self.slab_blocks)
            self.keys[layer].append(keys)
            self.values[layer].append(values)
            self._unevaluated.extend((keys, values))
        self.slab_appends += missing
        self.touch(layer, list(range(len(self.keys[layer]) - missing, len(self.keys[layer]))))

    def release_rows(self, layer: int, rows: int) -> int:
        """Drop the slabs above row ``rows`` (a multiple of slab_blocks: the bookkeeping released them, their rows
        are free). Nothing is copied; the dropped tensors' buffers return to MLX once nothing references them."""
        keep = rows // self.slab_blocks
        dropped = len(self.keys[layer]) - keep
        if dropped > 0:
            del self.keys[layer][keep:], self.values[layer][keep:]
            self.slab_releases += dropped
        return 0
