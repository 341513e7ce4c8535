"""RowBook: the row/refcount/capacity half of the pool's bookkeeping (plain Python, no mlx). :class:`BlockBook`
(``pool/bookkeeping.py``) adds the sequence-level operations on top.

Model. Every layer has physical rows ``0..num_rows-1`` (minted lazily, never unminted) and a reserved capacity
(rows rounded up to whole slabs, or to 32-row grow chunks for the monolithic design). A block is an opaque id,
unique across layers, that lives in one layer and holds exactly one row from creation to its last reference. Its
refcount is stored per row (``row_refcount``) and equals the number of block-table, handle and caller ("loose")
references to it. A row whose block's refcount drops to 0 goes back to the layer's free list; new blocks take the
lowest free row before a new row is minted. All sequence-level operations act on every layer in lockstep; only
:meth:`acquire_block` (the restore path) creates a block in a single layer.

Every public method validates completely before it mutates: on an exception nothing has changed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable

from pool.block_table import BlockTable, PrefixHandle
from pool.config import DESIGNS, MAX_DIMENSION, LayerGeometry, capacity_for, check_open_blocks, chunk_rows
from pool.errors import BudgetExceeded, PoolError
from pool.free_rows import FreeRows
from pool.limits import MemoryLimits, check_pool_capacity
from pool.ops import Copied, Grow, Op, RowsFreed, SetSlabBlocks, SlabAppend, StorageInit
from pool.shrink_types import ShrinkPolicy
from pool.stats import BookCounters, PoolBytes, PoolStats

OpListener = Callable[[Op], None]


@dataclass
class LayerRows:
    """Physical rows of one layer. ``row_block[r]`` is the block holding row r (-1: free); ``row_refcount[r]`` is
    that block's refcount (0: free)."""

    row_block: list[int] = field(default_factory=list)
    row_refcount: list[int] = field(default_factory=list)
    free: FreeRows = field(default_factory=FreeRows)
    capacity: int = 0

    @property
    def num_live(self) -> int:
        return len(self.row_block) - len(self.free)


@dataclass
class WritePlan:
    """What :meth:`BlockBook.prepare_write` did, for storage to execute: per layer, copy-on-write row pairs
    (src, dst) and capacity changes (layer, old_rows, new_rows)."""

    cow_pairs: list[list[tuple[int, int]]]
    growth: list[tuple[int, int, int]]


class RowBook:
    """Owns block ids, refcounts, rows, free lists, the budget, modelled capacity and op listeners; holds the
    tables of sequences and handles that :class:`pool.bookkeeping.BlockBook` operates on."""

    def __init__(self, num_layers: int, block_size: int = 32, design: str = "slab", slab_blocks: int = 32,
                 max_blocks_per_layer: int | None = None, bytes_per_row: int = 0,
                 shrink: ShrinkPolicy | None = None, open_blocks: str = "low") -> None:
        if design not in DESIGNS:
            raise PoolError(f"unknown pool design {design!r}; choose one of {', '.join(DESIGNS)}")
        check_open_blocks(open_blocks)
        self.open_blocks = open_blocks  # where a write's partly filled last block takes its row (_open_row)
        shrink = ShrinkPolicy() if shrink is None else shrink
        shrink.validate()
        self.shrink_policy = shrink  # what BlockBook.shrink does at each shrink point (pool/shrink_types.py)
        self.shrunk = False  # a shrink released every free chunk it could and no row was freed or reserved since
        self.shrink_idle: dict[int, tuple] = {}  # layers a shrink found nothing to do in, by state (book_shrink)
        self.num_layers = num_layers
        self.block_size = block_size
        self.design = design
        self.slab_blocks = slab_blocks
        self.max_blocks_per_layer = max_blocks_per_layer
        self.bytes_per_row = bytes_per_row
        self.layers = [LayerRows() for _ in range(num_layers)]
        self.blocks: dict[int, tuple[int, int]] = {}  # block id -> (layer, row)
        self.seqs: dict[int, list[BlockTable]] = {}
        self.handles: dict[int, list[BlockTable]] = {}
        self.loose: set[int] = set()  # blocks referenced by a caller (restore path), one reference each
        self.counters = BookCounters()
        self.bytes_now = PoolBytes()  # live/reserved bytes and slabs, updated at every row/capacity change
        self.row_bytes = [0] * num_layers  # K+V bytes per row of each layer with storage (0: not counted yet)
        self.geometry: LayerGeometry | None = None  # fixed by the first write (storage_init)
        self.versions = [0] * num_layers  # bumped on every row/refcount change of a layer (snapshot cache key)
        self._next_block_id = 0
        self._next_handle_id = 0
        self._listeners: list[OpListener] = []
        self.identity = uuid.uuid4().hex  # stamped on every PrefixHandle this book issues (see handle_tables)
        # what the device can hold (set by the pool that executes this book; None: bookkeeping alone, e.g. a
        # what-if replay modelling another machine, checks no memory)
        self.limits: MemoryLimits | None = None

    # ---- listeners -------------------------------------------------------------------------------------------
    def add_op_listener(self, fn: OpListener) -> None:
        self._listeners.append(fn)

    def _emit(self, op_type: type[Op], **fields) -> None:
        """Build the op only when someone listens (the book runs without listeners in replays)."""
        if self._listeners:
            record = op_type(**fields)
            for fn in self._listeners:
                fn(record)

    # ---- configuration ---------------------------------------------------------------------------------------
    def set_slab_blocks(self, slab_blocks: int) -> None:
        """Change rows per slab; only before any row is minted (capacity is counted in slabs)."""
        if not isinstance(slab_blocks, int) or isinstance(slab_blocks, bool) or not 1 <= slab_blocks <= MAX_DIMENSION:
            raise PoolError(f"slab_blocks must be an int in [1, {MAX_DIMENSION}], got {slab_blocks!r}")
        if any(layer.capacity for layer in self.layers):
            raise PoolError("set_slab_blocks is allowed only before the first write (storage already reserved)")
        self.slab_blocks = slab_blocks
        self._emit(SetSlabBlocks, slab_blocks=slab_blocks)

    def set_geometry(self, dtype: str, n_kv_heads: int, head_dim: int, bytes_per_row: int) -> None:
        """Record the row geometry fixed by the first write (byte figures use ``bytes_per_row``, K+V)."""
        self.geometry = LayerGeometry(dtype, n_kv_heads, head_dim)
        self.bytes_per_row = bytes_per_row
        self._emit(StorageInit, dtype=dtype, n_kv_heads=n_kv_heads, head_dim=head_dim,
                   bytes_per_row=bytes_per_row)

    def count_layer_bytes(self, layer: int, row_bytes: int) -> None:
        """Start counting ``layer`` in :attr:`bytes_now`: its storage exists now, ``row_bytes`` K+V bytes per row
        (its rows and capacity so far are added). Called once per layer, at its first write."""
        rows, now = self.layers[layer], self.bytes_now
        self.row_bytes[layer] = row_bytes
        now.live += rows.num_live * row_bytes
        now.reserved += rows.capacity * row_bytes
        now.slabs += rows.capacity // chunk_rows(self.design, self.slab_blocks)

    def note_measured_copies(self, growth_bytes: int, cow_bytes: int, moved_bytes: int = 0) -> None:
        """Record what storage measured one operation copying (pool/copy_meter.py) as a ``copied`` op, so a
        recording can rebuild the measured counters at any instant. The bookkeeping itself models nothing here."""
        self._emit(Copied, bytes=growth_bytes, cow_bytes=cow_bytes, moved_bytes=moved_bytes)

    # ---- lookups ---------------------------------------------------------------------------------------------
    def tables(self, seq_id: int) -> list[BlockTable]:
        try:
            return self.seqs[seq_id]
        except (KeyError, TypeError):
            raise PoolError(f"unknown sequence {seq_id!r}") from None

    def handle_tables(self, handle: PrefixHandle) -> list[BlockTable]:
        """The tables a live handle of *this* book pins. PoolError for anything else: not a PrefixHandle, a
        handle issued by another pool (ids are per-pool counters, so a foreign id may name an unrelated handle
        here), or one already released."""
        if not isinstance(handle, PrefixHandle):
            raise PoolError(f"expected a PrefixHandle, got {type(handle).__name__} {handle!r}")
        if handle.pool_id != self.identity:
            raise PoolError(f"prefix handle {handle.handle_id} was issued by another pool "
                            f"({handle.pool_id or 'none'}), not this one ({self.identity})")
        try:
            return self.handles[handle.handle_id]
        except (KeyError, TypeError):
            raise PoolError(f"unknown or released prefix handle {handle!r}") from None

    def prefix_handle(self, handle_id: int) -> PrefixHandle:
        """The ticket for live handle ``handle_id`` of this book (what detach returned; rebuilt books use this)."""
        try:
            tables = self.handles[handle_id]
        except (KeyError, TypeError):
            raise PoolError(f"unknown or released prefix handle id {handle_id!r}") from None
        return PrefixHandle(handle_id, tables[0].length, tables[0].logical_start, self.identity)

    def block_location(self, block_id: int) -> tuple[int, int]:
        """(layer, row) of a live block."""
        try:
            return self.blocks[block_id]
        except (KeyError, TypeError):
            raise PoolError(f"unknown or freed block {block_id!r}") from None

    def refcount(self, block_id: int) -> int:
        layer, row = self.block_location(block_id)
        return self.layers[layer].row_refcount[row]

    def check_layer(self, layer: int) -> None:
        if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < self.num_layers:
            raise PoolError(f"layer {layer!r} out of range [0, {self.num_layers})")

    def stats(self) -> PoolStats:
        """Totals over all layers, byte figures modelled as rows x ``bytes_per_row`` (a live pool measures them on
        its storage instead: ``PagedKVPool.stats``)."""
        layers, bpr = self.layers, self.bytes_per_row
        live = sum(rows.num_live for rows in layers)
        allocated = sum(len(rows.row_block) for rows in layers)
        return PoolStats(allocated_blocks=allocated, live_blocks=live, free_blocks=allocated - live,
                         bytes_reserved=sum(rows.capacity for rows in layers) * bpr, bytes_in_use=live * bpr,
                         num_sequences=len(self.seqs), num_handles=len(self.handles))

    def can_allocate(self, num_new_blocks: int) -> bool:
        """True when every layer can take ``num_new_blocks`` more live blocks within the budget."""
        budget = self.max_blocks_per_layer
        return budget is None or all(layer.num_live + num_new_blocks <= budget for layer in self.layers)

    # ---- rows and references (private mutators) --------------------------------------------------------------
    def _check_budget(self, layer: int, needed: int) -> None:
        budget = self.max_blocks_per_layer
        live = self.layers[layer].num_live
        if budget is not None and live + needed > budget:
            raise BudgetExceeded(f"layer {layer}: {live} live blocks + {needed} new would exceed "
                                 f"max_blocks_per_layer={budget}; release sequences or handles first")

    def _check_room(self, needed: list[int]) -> None:
        """SizeLimitError when ``needed[layer]`` more live blocks per layer would grow the reserved capacity past
        ``limits`` (pool/limits.py). Checked before any mutation; no-op until the row geometry is known."""
        if self.limits is None or not self.bytes_per_row:
            return
        capacities = []
        for rows, count in zip(self.layers, needed):
            minted = self._rows_after(rows, count)
            capacities.append(max(rows.capacity, capacity_for(self.design, self.slab_blocks, minted)))
        if capacities != [rows.capacity for rows in self.layers]:
            check_pool_capacity(self.design, self.slab_blocks, capacities, self.bytes_per_row, self.limits)

    def _new_block(self, layer: int, open_block: bool = False, park: bool = False) -> tuple[int, int]:
        """Create a block with refcount 1 on the lowest free row (or a newly minted one); an ``open_block`` (a write
        leaves it partly filled) of an ``open_blocks="high"`` book on the row ``_open_row`` picks (``park``: see
        there). Returns (id, row)."""
        rows = self.layers[layer]
        block_id = self._next_block_id
        self._next_block_id += 1
        if open_block and self.open_blocks == "high":
            row = self._open_row(rows, park)
        elif len(rows.free):
            row = rows.free.pop_lowest()
            self.counters.rows_reused += 1
        else:
            row = self._mint(rows, len(rows.row_block))
        rows.row_block[row] = block_id
        rows.row_refcount[row] = 1
        self.blocks[block_id] = (layer, row)
        self.counters.blocks_created += 1
        self.bytes_now.live += self.row_bytes[layer]
        self.versions[layer] += 1
        return block_id, row

    def _open_row(self, rows: LayerRows, park: bool) -> int:
        """The row of an open block under ``open_blocks="high"``: the top row of the reserved capacity while it is
        unminted (the rows between are minted free, for the full blocks that take the lowest free rows), else the
        highest free row, else a new row. So the open blocks of sequences admitted together (the engine reserves
        their final lengths at admission) share the top slab, and so do the blocks a decode step opens: its token
        writes touch one slab, not one per sequence. With ``park`` (a prefill chunk: the write's full blocks came
        first), the row the block would have taken as the lowest free one is parked (``FreeRows.park``: handed out
        last), so the next sequence's blocks land where they would have without the policy, from the same slab
        boundaries (``reserve`` holds a row for it). Never above the budget: minted rows stay within it."""
        free = rows.free
        natural = free.lowest_unparked() if park else None
        top = rows.capacity if self.max_blocks_per_layer is None else min(rows.capacity, self.max_blocks_per_layer)
        if top > len(rows.row_block):
            if park and natural is None and top - 1 > len(rows.row_block):
                natural = len(rows.row_block)  # the first of the rows minted free below the top
            row = self._mint(rows, top - 1)
        elif free.unparked:
            self.counters.rows_reused += 1
            row = free.pop_highest()
        elif len(free):  # parked rows only: they are free, so no row is minted past them
            self.counters.rows_reused += 1
            return free.pop_highest()
        else:
            return self._mint(rows, len(rows.row_block))
        if natural is not None and natural != row:
            free.park(natural)
        return row

    def _mint(self, rows: LayerRows, row: int) -> int:
        """Mint rows up to ``row`` (those below it free) and return ``row``, still to be given its block."""
        first = len(rows.row_block)
        rows.row_block.extend([-1] * (row + 1 - first))
        rows.row_refcount.extend([0] * (row + 1 - first))
        rows.free.push_range(first, row)
        self.counters.rows_minted += row + 1 - first
        self.counters.rows_minted_free += row - first
        return row

    def _add_refs(self, layer: int, rows: list[int]) -> None:
        counts = self.layers[layer].row_refcount
        for row in rows:
            counts[row] += 1
        self.versions[layer] += 1

    def _drop_refs(self, layer: int, rows: list[int]) -> list[int]:
        """Drop one reference per row; rows reaching refcount 0 are freed. Returns the freed rows."""
        layer_rows = self.layers[layer]
        counts = layer_rows.row_refcount
        freed = []
        for row in rows:
            counts[row] -= 1
            if counts[row] == 0:
                del self.blocks[layer_rows.row_block[row]]
                layer_rows.row_block[row] = -1
                layer_rows.free.push(row)
                freed.append(row)
        self.counters.rows_freed += len(freed)
        if freed:
            self.shrunk = False
        self.bytes_now.live -= len(freed) * self.row_bytes[layer]
        self.versions[layer] += 1
        return freed

    def _drop_tables(self, tables: list[BlockTable]) -> None:
        freed0: list[int] = []
        count = 0
        for layer, table in enumerate(tables):
            freed = self._drop_refs(layer, table.rows)
            count += len(freed)
            if layer == 0:
                freed0 = freed
        if count:
            self._emit(RowsFreed, rows=freed0, count=count)

    def _rows_after(self, layer: LayerRows, extra_blocks: int) -> int:
        """Rows ``layer`` holds once ``extra_blocks`` more blocks take its free rows first and mint the rest, never
        past the budget: a reservation stops there (a write past it is refused earlier, by ``_check_budget``, and
        a row is minted only when none is free, so minted rows never exceed the budget), and the memory check
        (``_check_room``) counts exactly what the reservation would hold."""
        rows = len(layer.row_block) + max(0, extra_blocks - len(layer.free))
        budget = self.max_blocks_per_layer
        return rows if budget is None else min(rows, max(len(layer.row_block), budget))

    def _reserve_capacity(self, extra_blocks: int = 0) -> list[tuple[int, int, int]]:
        """Round every layer's capacity up to hold its minted rows, plus the rows ``extra_blocks`` more blocks would
        mint (after taking free rows; never past the budget); model the growth. Returns (layer, old, new)."""
        growth = []
        for index, layer in enumerate(self.layers):
            needed = capacity_for(self.design, self.slab_blocks, self._rows_after(layer, extra_blocks))
            if needed > layer.capacity:
                growth.append((index, layer.capacity, needed))
                if self.row_bytes[index]:
                    self.bytes_now.reserved += (needed - layer.capacity) * self.row_bytes[index]
                    self.bytes_now.slabs += (needed - layer.capacity) // chunk_rows(self.design, self.slab_blocks)
                layer.capacity = needed
        if growth:
            self._model_growth(growth)
        return growth

    def _model_growth(self, growth: list[tuple[int, int, int]]) -> None:
        old_rows, new_rows = growth[0][1], growth[0][2]
        if self.design == "slab":
            slabs = sum((new - old) // self.slab_blocks for _, old, new in growth)
            self.counters.slab_appends += slabs
            added = sum(new - old for _, old, new in growth) * self.bytes_per_row
            self._emit(SlabAppend, layers=len(growth), count=slabs, bytes=added)
        else:
            copied = sum(old for _, old, _ in growth) * self.bytes_per_row
            self.counters.grow_events += len(growth)
            self.counters.bytes_copied += copied
            self._emit(Grow, layers=len(growth), old_rows=old_rows, new_rows=new_rows, bytes_copied=copied)
