"""RowBook: the row/refcount/capacity half of the pool's bookkeeping (plain Python, no mlx). :class:`BlockBook`
(``pool/bookkeeping.py``) adds the sequence-level operations on top.

Model: one row space. The pool has physical rows ``0..num_rows-1`` (minted lazily, dropped only by a shrink) and a
reserved capacity (rows rounded up to whole slabs, or to 32-row grow chunks for the monolithic design). Every
layer's storage holds row ``r`` at the same index, so a row is one block of every layer: the bookkeeping keeps one
block table per sequence, one refcount list, one free list, one capacity and one version for the whole pool, and
its per-step work does not grow with depth. A block is an opaque id that holds exactly one row from creation to its
last reference (a shrink may move it to another row; its id, refcount and sharing stay). Its refcount is stored per
row (``row_refcount``) and equals the number of block-table and handle references to it. A row whose block's
refcount drops to 0 goes back to the free list; new blocks take the lowest free row before a new row is minted.

Figures users see keep their meaning from when each layer had its own rows: counters, stats and op fields that
count rows, slabs or bytes count them *over all layers* (a row event counts ``num_layers`` times, as storage
executes it in every layer), and ``bytes_per_row`` is the K+V bytes of one row in one layer.

Every public method validates completely before it mutates: on an exception nothing has changed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable

from pool.block_table import BlockTable, PrefixHandle
from pool.config import DESIGNS, MAX_DIMENSION, LayerGeometry, capacity_for, check_open_blocks, chunk_rows
from pool.errors import BudgetExceeded, PoolError
from pool.free_rows import FreeRows
from pool.limits import MemoryLimits, check_pool_capacity
from pool.ops import Copied, Grow, Op, RowsFreed, SetSlabBlocks, SlabAppend, StorageInit
from pool.shrink_types import ShrinkPolicy
from pool.stats import BookCounters, PoolStats

OpListener = Callable[[Op], None]


@dataclass
class WritePlan:
    """What the bookkeeping did that storage must execute in every layer: copy-on-write row pairs (src, dst) and
    a capacity change (old rows, new rows), or None."""

    cow_pairs: list[tuple[int, int]]
    growth: tuple[int, int] | None

    @property
    def empty(self) -> bool:
        return not self.cow_pairs and self.growth is None


class RowBook:
    """Owns block ids, the row arrays, refcounts, free rows, the budget, modelled capacity and op listeners; holds
    the tables of sequences and handles that :class:`pool.bookkeeping.BlockBook` operates on."""

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
        self.num_layers = num_layers
        self.block_size = block_size
        self.design = design
        self.slab_blocks = slab_blocks
        self.max_blocks_per_layer = max_blocks_per_layer  # live rows (each row is a block of every layer)
        self.bytes_per_row = bytes_per_row  # K+V bytes of one row in one layer (0 until the geometry is known)
        self.row_block: list[int] = []  # block holding each minted row (-1: free)
        self.row_refcount: list[int] = []  # that block's refcount (0: free)
        self.free = FreeRows()
        self.capacity = 0  # reserved rows (every layer's storage holds this many)
        self.version = 0  # bumped on every row or reference change (token slots and snapshots are stamped by it)
        self.blocks: dict[int, int] = {}  # block id -> row
        self.seqs: dict[int, BlockTable] = {}
        self.handles: dict[int, BlockTable] = {}
        self.counters = BookCounters()
        self.geometry: LayerGeometry | None = None  # fixed by the first write (storage_init)
        self._next_block_id = 0
        self._next_handle_id = 0
        self._listeners: list[OpListener] = []
        self.identity = uuid.uuid4().hex  # stamped on every PrefixHandle this book issues (see handle_table)
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
        """Change rows per slab; only before any capacity is reserved (capacity is counted in slabs). Older
        recordings hold it as an op; a pool fixes it in its configuration."""
        if not isinstance(slab_blocks, int) or isinstance(slab_blocks, bool) or not 1 <= slab_blocks <= MAX_DIMENSION:
            raise PoolError(f"slab_blocks must be an int in [1, {MAX_DIMENSION}], got {slab_blocks!r}")
        if self.capacity:
            raise PoolError("set_slab_blocks is allowed only before the first write (storage already reserved)")
        self.slab_blocks = slab_blocks
        self._emit(SetSlabBlocks, slab_blocks=slab_blocks)

    def set_geometry(self, dtype: str, n_kv_heads: int, head_dim: int, bytes_per_row: int) -> None:
        """Record the row geometry fixed by the first write (byte figures use ``bytes_per_row``, K+V of one row in
        one layer)."""
        self.geometry = LayerGeometry(dtype, n_kv_heads, head_dim)
        self.bytes_per_row = bytes_per_row
        self._emit(StorageInit, dtype=dtype, n_kv_heads=n_kv_heads, head_dim=head_dim,
                   bytes_per_row=bytes_per_row)

    def note_measured_copies(self, growth_bytes: int, cow_bytes: int, moved_bytes: int = 0) -> None:
        """Record what storage measured one operation copying (pool/copy_meter.py) as a ``copied`` op, so a
        recording can rebuild the measured counters at any instant. The bookkeeping itself models nothing here."""
        self._emit(Copied, bytes=growth_bytes, cow_bytes=cow_bytes, moved_bytes=moved_bytes)

    # ---- lookups ---------------------------------------------------------------------------------------------
    def table(self, seq_id: int) -> BlockTable:
        """The sequence's block table (the book's own: read it, never mutate it)."""
        try:
            return self.seqs[seq_id]
        except (KeyError, TypeError):
            raise PoolError(f"unknown sequence {seq_id!r}") from None

    def handle_table(self, handle: PrefixHandle) -> BlockTable:
        """The table a live handle of *this* book pins. PoolError for anything else: not a PrefixHandle, a handle
        issued by another pool (ids are per-pool counters, so a foreign id may name an unrelated handle here), or
        one already released."""
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
            table = self.handles[handle_id]
        except (KeyError, TypeError):
            raise PoolError(f"unknown or released prefix handle id {handle_id!r}") from None
        return PrefixHandle(handle_id, table.length, table.logical_start, self.identity)

    def block_row(self, block_id: int) -> int:
        """The row of a live block."""
        try:
            return self.blocks[block_id]
        except (KeyError, TypeError):
            raise PoolError(f"unknown or freed block {block_id!r}") from None

    def refcount(self, block_id: int) -> int:
        return self.row_refcount[self.block_row(block_id)]

    @property
    def num_live(self) -> int:
        """Rows holding a live block."""
        return len(self.row_block) - len(self.free)

    def stats(self) -> PoolStats:
        """Totals over all layers (rows x ``num_layers``), byte figures modelled as rows x ``bytes_per_row`` x
        ``num_layers`` (a live pool measures reserved bytes on its storage instead: ``PagedKVPool.stats``)."""
        layers, bpr = self.num_layers, self.bytes_per_row
        live, allocated = self.num_live * layers, len(self.row_block) * layers
        return PoolStats(allocated_blocks=allocated, live_blocks=live, free_blocks=allocated - live,
                         bytes_reserved=self.capacity * layers * bpr, bytes_in_use=live * bpr,
                         num_sequences=len(self.seqs), num_handles=len(self.handles))

    def can_allocate(self, num_new_blocks: int) -> bool:
        """True when ``num_new_blocks`` more live blocks (rows) fit the budget."""
        budget = self.max_blocks_per_layer
        return budget is None or self.num_live + num_new_blocks <= budget

    # ---- rows and references (private mutators) --------------------------------------------------------------
    def _check_budget(self, needed: int) -> None:
        budget = self.max_blocks_per_layer
        live = self.num_live
        if budget is not None and live + needed > budget:
            raise BudgetExceeded(f"{live} live blocks + {needed} new would exceed max_blocks_per_layer={budget}; "
                                 "release sequences or handles first")

    def _check_room(self, needed: int) -> None:
        """SizeLimitError when ``needed`` more live blocks would grow the reserved capacity past ``limits``
        (pool/limits.py) in every layer. Checked before any mutation; no-op until the row geometry is known."""
        if self.limits is None or not self.bytes_per_row:
            return
        capacity = max(self.capacity, capacity_for(self.design, self.slab_blocks, self._rows_after(needed)))
        if capacity != self.capacity:
            check_pool_capacity(self.design, self.slab_blocks, [capacity] * self.num_layers, self.bytes_per_row,
                                self.limits)

    def _new_block(self, open_block: bool = False, park: bool = False) -> tuple[int, int]:
        """Create a block with refcount 1 on the lowest free row (or a newly minted one); an ``open_block`` (a write
        leaves it partly filled) of an ``open_blocks="high"`` book on the row ``_open_row`` picks (``park``: see
        there). Returns (id, row)."""
        block_id = self._next_block_id
        self._next_block_id += 1
        if open_block and self.open_blocks == "high":
            row = self._open_row(park)
        elif len(self.free):
            row = self.free.pop_lowest()
            self.counters.rows_reused += self.num_layers
        else:
            row = self._mint(len(self.row_block))
        self.row_block[row] = block_id
        self.row_refcount[row] = 1
        self.blocks[block_id] = row
        self.counters.blocks_created += self.num_layers
        self.version += 1
        return block_id, row

    def _open_row(self, park: bool) -> int:
        """The row of an open block under ``open_blocks="high"``: the top row of the reserved capacity while it is
        unminted (the rows between are minted free, for the full blocks that take the lowest free rows), else the
        highest free row, else a new row. So the open blocks of sequences admitted together (the engine reserves
        their final lengths at admission) share the top slab, and so do the blocks a decode step opens: its token
        writes touch one slab, not one per sequence. With ``park`` (a prefill chunk: the write's full blocks came
        first), the row the block would have taken as the lowest free one is parked (``FreeRows.park``: handed out
        last), so the next sequence's blocks land where they would have without the policy, from the same slab
        boundaries (``reserve`` holds a row for it). Never above the budget: minted rows stay within it."""
        free = self.free
        natural = free.lowest_unparked() if park else None
        top = self.capacity if self.max_blocks_per_layer is None else min(self.capacity, self.max_blocks_per_layer)
        if top > len(self.row_block):
            if park and natural is None and top - 1 > len(self.row_block):
                natural = len(self.row_block)  # the first of the rows minted free below the top
            row = self._mint(top - 1)
        elif free.unparked:
            self.counters.rows_reused += self.num_layers
            row = free.pop_highest()
        elif len(free):  # parked rows only: they are free, so no row is minted past them
            self.counters.rows_reused += self.num_layers
            return free.pop_highest()
        else:
            return self._mint(len(self.row_block))
        if natural is not None and natural != row:
            free.park(natural)
        return row

    def _mint(self, row: int) -> int:
        """Mint rows up to ``row`` (those below it free) and return ``row``, still to be given its block."""
        first = len(self.row_block)
        self.row_block.extend([-1] * (row + 1 - first))
        self.row_refcount.extend([0] * (row + 1 - first))
        self.free.push_range(first, row)
        self.counters.rows_minted += (row + 1 - first) * self.num_layers
        self.counters.rows_minted_free += (row - first) * self.num_layers
        return row

    def _add_refs(self, rows: list[int]) -> None:
        counts = self.row_refcount
        for row in rows:
            counts[row] += 1
        self.version += 1

    def _drop_refs(self, rows: list[int]) -> list[int]:
        """Drop one reference per row; rows reaching refcount 0 are freed. Returns the freed rows."""
        counts, row_block = self.row_refcount, self.row_block
        freed = []
        for row in rows:
            counts[row] -= 1
            if counts[row] == 0:
                del self.blocks[row_block[row]]
                row_block[row] = -1
                self.free.push(row)
                freed.append(row)
        self.counters.rows_freed += len(freed) * self.num_layers
        if freed:
            self.shrunk = False
        self.version += 1
        return freed

    def _drop_table(self, table: BlockTable) -> None:
        freed = self._drop_refs(table.rows)
        if freed:
            self._emit(RowsFreed, rows=freed, count=len(freed) * self.num_layers)

    def _rows_after(self, extra_blocks: int) -> int:
        """Rows minted once ``extra_blocks`` more blocks take the free rows first and mint the rest, never past the
        budget: a reservation stops there (a write past it is refused earlier, by ``_check_budget``, and a row is
        minted only when none is free, so minted rows never exceed the budget), and the memory check
        (``_check_room``) counts exactly what the reservation would hold."""
        rows = len(self.row_block) + max(0, extra_blocks - len(self.free))
        budget = self.max_blocks_per_layer
        return rows if budget is None else min(rows, max(len(self.row_block), budget))

    def _reserve_capacity(self, extra_blocks: int = 0) -> tuple[int, int] | None:
        """Round the capacity up to hold the minted rows, plus the rows ``extra_blocks`` more blocks would mint
        (after taking free rows; never past the budget); model the growth. Returns (old, new) rows, or None."""
        needed = capacity_for(self.design, self.slab_blocks, self._rows_after(extra_blocks))
        if needed <= self.capacity:
            return None
        growth = (self.capacity, needed)
        self.capacity = needed
        self._model_growth(*growth)
        return growth

    def _model_growth(self, old: int, new: int) -> None:
        layers = self.num_layers
        if self.design == "slab":
            slabs = (new - old) // self.slab_blocks * layers
            self.counters.slab_appends += slabs
            self._emit(SlabAppend, layers=layers, count=slabs, bytes=(new - old) * layers * self.bytes_per_row)
        else:
            copied = old * layers * self.bytes_per_row
            self.counters.grow_events += layers
            self.counters.bytes_copied += copied
            self._emit(Grow, layers=layers, old_rows=old, new_rows=new, bytes_copied=copied)
