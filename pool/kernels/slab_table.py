"""Device tables of slab base addresses: what lets one fused-decode launch read any number of slabs through a constant
number of kernel inputs (queries, the plan's meta, one table per layer).

A layer's table holds, per slab ``s``, the device address of its K tensor at entry ``2 s`` and of its V tensor at
``2 s + 1`` (uint64). A tiny kernel writes it: it takes the previous table and the slabs to refresh as *inputs*
(so MLX orders it after every write into them) and stores their addresses, copying every other entry. The decode
kernel takes the table as an input, so it runs after the refresh, which runs after this step's writes.

Which entries to refresh (the one rule every backend follows, its emulation included): the storage bumps a stamp
per (layer, slab) whenever a slab tensor may have a new buffer (``RowStorage.touch``: a decode token write, a
prefill span, a copy-on-write or shrink move into it, a growth). A write that MLX does not donate gives the slab a
new buffer, so a slab written this step always refreshes its entry. ``SlabTables.table(layer)`` refreshes exactly
the slabs whose stamp differs from the one its table reflects: in a decode step, the slabs holding the sequences'
tail blocks (at most one per sequence), bucketed to a few input counts (``WRITE_BUCKETS``, padding repeats the first
slab); after a prefill or a compaction, every touched slab, in groups of ``MAX_WRITES``. A shrink's dropped slabs
keep stale entries that no plan reads (its rows index only live slabs); a slab appended later is stamped by the
growth. Growth past the table's capacity (a power of two) copies the old entries into a larger table.

Nothing here depends on the backend: a ``TableWriter`` (CUDA: ``slab_table_cuda.py``; the CPU emulation:
``paged_decode_emulated.py``) makes the new table from the old one. Imports mlx inside functions only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

TABLE_ENV = "SLABSCOPE_SLAB_TABLE"     # "0": the CUDA kernel takes every slab as an input (the per-slab route)
WRITE_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
MAX_WRITES = WRITE_BUCKETS[-1]          # slabs refreshed per table-update launch
MIN_CAPACITY = 8
MEMO_ENTRIES = 256                      # slot-index arrays kept (a step's written slabs repeat across its layers)


def table_route(environ: dict | None = None) -> bool:
    """Whether the CUDA kernel reads slabs through the device table (default) or takes each slab as an input."""
    env = os.environ if environ is None else environ
    return env.get(TABLE_ENV, "1").strip() != "0"


def write_bucket(count: int) -> int:
    """Slab inputs of a table update refreshing ``count`` slabs (1 <= count <= MAX_WRITES)."""
    for bucket in WRITE_BUCKETS:
        if count <= bucket:
            return bucket
    raise ValueError(f"{count} slabs in one table update (at most {MAX_WRITES})")


def table_capacity(num_slabs: int) -> int:
    """Slabs a table holds: the smallest power of two >= ``num_slabs`` (at least ``MIN_CAPACITY``)."""
    capacity = MIN_CAPACITY
    while capacity < num_slabs:
        capacity *= 2
    return capacity


class TableWriter(Protocol):
    def update(self, table, slots: Sequence[int], slots_array, keys: Sequence, values: Sequence, capacity: int):
        """A table of ``capacity`` slabs: ``table``'s entries (None: none yet; fewer slabs: the rest zero) with slab
        ``slots[i]``'s entries set to ``keys[i]`` / ``values[i]``. ``slots_array``: ``slots`` as an int32
        mx.array. Must take ``keys``/``values`` as inputs of what it returns (the lazy-ordering contract)."""


@dataclass
class LayerTable:
    table: object          # the writer's table
    capacity: int
    seen: np.ndarray       # [capacity] the storage stamps the entries reflect
    touches: int = -1      # the storage's ``layer_touches`` when ``seen`` was last brought up to date


class SlabTables:
    """One layer table per layer of one storage, made and refreshed by one writer. Lives in the storage's
    ``kernel_state`` and holds no reference to it (no cycle: the storage's slabs are freed as soon as the pool is
    dropped). ``updates`` counts table-update launches (tests, benchmarks)."""

    def __init__(self, writer: TableWriter):
        self.writer = writer
        self.layers: dict[int, LayerTable] = {}
        self.updates = 0
        self._slots_memo: dict[tuple[int, ...], object] = {}

    def table(self, storage, layer: int):
        """The layer's table, refreshed for the slabs ``storage`` (the one this object belongs to) holds now (see
        the module docstring). Mutates this object's tables and stamps; reads the storage."""
        keys, values = storage.slabs(layer)
        count = len(keys)
        entry = self.layers.get(layer)
        touches = storage.layer_touches[layer]
        if entry is not None and entry.touches == touches and entry.capacity >= count:
            return entry.table  # nothing touched since: no entry can be stale (asked twice per layer per step)
        stamps = storage.slab_stamps[layer]
        if entry is None or entry.capacity < count:
            capacity = table_capacity(count)
            seen = np.full(capacity, -1, dtype=np.int64)  # never matches a stamp: every entry is written
            if entry is not None:
                seen[:entry.capacity] = entry.seen
            entry = self.layers[layer] = LayerTable(None if entry is None else entry.table, capacity, seen)
            stale = np.flatnonzero(stamps[:count] != seen[:count]) if count <= stamps.shape[0] else np.arange(count)
            force = True  # a new or larger table is written even when no entry is stale
        else:
            stale = np.flatnonzero(stamps[:count] != entry.seen[:count])
            force = False
        entry.touches = touches
        if stale.size == 0 and not force:
            return entry.table
        if stale.size == 0:
            stale = np.zeros(1, dtype=np.int64)
        for first in range(0, stale.size, MAX_WRITES):
            group = stale[first:first + MAX_WRITES].tolist()
            padded = group + [group[0]] * (write_bucket(len(group)) - len(group))
            entry.table = self.writer.update(entry.table, padded, self._slots(padded), [keys[i] for i in padded],
                                             [values[i] for i in padded], entry.capacity)
            self.updates += 1
        entry.seen[stale] = stamps[stale]
        return entry.table

    def replace(self, layer: int, table) -> None:
        """Make ``table`` the layer's table without touching its stamps: the table a table write returned (the same
        addresses; the write changed the slabs' contents, not their buffers, pool/kernels/table_write.py)."""
        self.layers[layer].table = table

    def _slots(self, slots: list[int]):
        """``slots`` as an int32 mx.array, memoised: every layer of a decode step refreshes the same slabs."""
        key = tuple(slots)
        array = self._slots_memo.get(key)
        if array is None:
            import mlx.core as mx

            if len(self._slots_memo) >= MEMO_ENTRIES:
                self._slots_memo.clear()
            array = self._slots_memo[key] = mx.array(slots, dtype=mx.int32)
        return array


def slab_tables(storage, name: str, make_writer) -> SlabTables:
    """The storage's ``SlabTables`` for writer ``name`` (made with ``make_writer()`` on first use)."""
    tables = storage.kernel_state.get(name)
    if tables is None:
        tables = storage.kernel_state[name] = SlabTables(make_writer())
    return tables
