"""BlockBook: the pool's bookkeeping in plain Python (no mlx import, directly or indirectly).

It runs alone (what-if replays drive it with the sequence-level ops of an op log and a different geometry; it counts
rows, slabs and modelled bytes exactly as the storage would) or is driven by :class:`pool.PagedKVPool`, which
executes the returned :class:`WritePlan` on storage. Row/refcount/capacity machinery lives in ``pool/book_rows.py``;
the invariants are checked by ``pool/book_integrity.py``.

Every public method validates completely before it mutates: on an exception nothing has changed. Each successful
sequence-level method emits its op (``docs/contracts.md``) after its derived ops.
"""

from __future__ import annotations

from pool import book_state
from pool.block_table import BlockTable, PrefixHandle
from pool.book_shrink import ShrinkPlan, apply_shrink, plan_shrink
from pool.book_rows import OpListener, RowBook, WritePlan
from pool.book_state import BookState
from pool.config import PoolConfig, blocks_for_tokens, chunk_rows
from pool.errors import PoolError
from pool.step_view import StepView
from pool.ops import (Adopt, AddSequence, BlockMove, Clone, CopyOnWrite, Detach, PrepareWrite, Release, ReleaseHandle,
                      Reserve, RowMint, SetLogicalStart, ShrinkTick, SlabRelease, Trim)

__all__ = ["BlockBook", "OpListener", "WritePlan"]


def _check_int(name: str, value, minimum: int = 0) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise PoolError(f"{name} must be an int >= {minimum}, got {value!r}")


def _exclusive(rows: list[int], counts: list[int], first: int, last: int) -> bool:
    """True when blocks ``first..last`` of a table (all present) each have refcount 1. A plain loop: every decode
    step asks this once per sequence."""
    for index in range(first, last + 1):
        if counts[rows[index]] != 1:
            return False
    return True


class BlockBook(RowBook):
    """Sequences and handles (one block table each) on top of :class:`RowBook`'s rows and refcounts."""

    @classmethod
    def from_config(cls, config: PoolConfig, max_blocks_per_layer: int | None = None) -> "BlockBook":
        """An empty book of ``config`` (the pool's configuration, the one a recording's metadata holds). The budget
        is ``max_blocks_per_layer`` when given (a replay bounds what it holds), else the configuration's."""
        budget = config.max_blocks_per_layer if max_blocks_per_layer is None else max_blocks_per_layer
        return cls(config.num_layers, config.block_size, config.design, config.slab_blocks, budget,
                   shrink=config.shrink, open_blocks=config.open_blocks)

    # ---- serialisation (pool/book_state.py) ------------------------------------------------------------------
    def state(self) -> BookState:
        """Everything this book is, as a typed record (a copy). Mutates nothing."""
        return book_state.state_of(self)

    @classmethod
    def from_state(cls, state: BookState, max_blocks_per_layer: int | None = None,
                   check: bool = False) -> "BlockBook":
        """A new book (no listeners) in ``state``; ``check`` also verifies every invariant (PoolError), for
        states read from outside."""
        if check:
            return book_state.validated(cls, state)
        return book_state.restore(cls, state, max_blocks_per_layer)

    def handle_map(self) -> dict[int, PrefixHandle]:
        """Tickets of the live prefix handles by id (replays continue from a restored book with these)."""
        return book_state.handle_map(self)

    # ---- sequences -------------------------------------------------------------------------------------------
    def add_sequence(self, seq_id: int) -> None:
        """Register an empty sequence (no blocks yet)."""
        _check_int("seq_id", seq_id)
        if seq_id in self.seqs:
            raise PoolError(f"sequence {seq_id} already exists")
        self.seqs[seq_id] = BlockTable()
        self._emit(AddSequence, seq=seq_id)

    def sequence_ids(self) -> list[int]:
        return list(self.seqs)

    def seq_length(self, seq_id: int) -> int:
        return self.table(seq_id).length

    def logical_start(self, seq_id: int) -> int:
        return self.table(seq_id).logical_start

    def block_rows(self, seq_id: int) -> list[int]:
        """The sequence's physical rows, logical order (a copy)."""
        return list(self.table(seq_id).rows)

    def step_view(self, seq_ids) -> StepView:
        """The sequences' rows, lengths and logical starts and the slab layout every layer's storage holds (slabs of
        ``slab_blocks`` rows; monolithic: one tensor of the capacity), as one frozen view (pool/step_view.py).
        Reads only; PoolError for an unknown sequence."""
        tables = [self.table(seq_id) for seq_id in seq_ids]
        if self.design == "slab":
            num_slabs, per_slab = self.capacity // self.slab_blocks, self.slab_blocks
        else:
            num_slabs, per_slab = int(self.capacity > 0), self.capacity
        return StepView(seq_ids=tuple(seq_ids), rows=tuple(tuple(t.rows) for t in tables),
                        lengths=tuple(t.length for t in tables), logical_starts=tuple(t.logical_start for t in tables),
                        block_size=self.block_size, design=self.design, geometry=self.geometry,
                        num_slabs=num_slabs if self.geometry else 0, rows_per_slab=per_slab if self.geometry else 0,
                        version=self.version)

    def prepare_write(self, seq_id: int, start: int, num_tokens: int) -> WritePlan:
        """Make tokens ``[start, start+num_tokens)`` writable: extend the table, copy-on-write shared blocks in the
        span (new block + row, one reference moved off the original), mint/reuse rows, reserve capacity. Mutates the
        table, rows, refcounts, capacity and counters; returns what storage must do in every layer."""
        table = self.table(seq_id)
        _check_int("start", start)
        _check_int("num_tokens", num_tokens, 1)
        length = table.length
        if start > length:
            raise PoolError(f"sequence {seq_id}: write start {start} is past its length {length} (no gaps)")
        first, last = start // self.block_size, (start + num_tokens - 1) // self.block_size
        rows, counts = table.rows, self.row_refcount
        if last < len(rows) and _exclusive(rows, counts, first, last):
            # the common decode case (the span lies in blocks the sequence owns alone): nothing to copy, mint or
            # reserve, only the length moves
            table.length = max(length, start + num_tokens)
            self._emit(PrepareWrite, seq=seq_id, start=start, num_tokens=num_tokens)
            return WritePlan(cow_pairs=[], growth=None)
        cow = [index for index in range(first, min(last + 1, len(rows))) if counts[rows[index]] > 1]
        new_blocks = max(0, last + 1 - len(rows))
        self._check_budget(len(cow) + new_blocks)
        self._check_room(len(cow) + new_blocks)
        before = (self.counters.rows_minted, self.counters.rows_reused)
        cow_pairs = self._copy_on_write(seq_id, table, cow)
        self._extend(table, new_blocks, cow_pairs, before, open_last=(start + num_tokens) % self.block_size != 0)
        table.length = max(length, start + num_tokens)
        growth = self._reserve_capacity()
        self._emit(PrepareWrite, seq=seq_id, start=start, num_tokens=num_tokens)
        return WritePlan(cow_pairs=cow_pairs, growth=growth)

    def _copy_on_write(self, seq_id: int, table: BlockTable, indices: list[int]) -> list[tuple[int, int]]:
        pairs = []
        for index in indices:
            src_row = table.rows[index]
            block_id, row = self._new_block()
            self._drop_refs([src_row])  # refcount was > 1: never frees
            table.block_ids[index], table.rows[index] = block_id, row
            pairs.append((src_row, row))
            self._emit(CopyOnWrite, seq=seq_id, logical_block=index, num_layers=self.num_layers)
        self.counters.cow_copies += len(pairs) * self.num_layers
        return pairs

    def _extend(self, table: BlockTable, new_blocks: int, cow_pairs: list[tuple[int, int]],
                before: tuple[int, int], open_last: bool = False) -> None:
        """Append ``new_blocks`` blocks to the table; ``open_last``: the write leaves the last one partly filled
        (its row is the open block's: ``RowBook._open_row``)."""
        if not new_blocks and not cow_pairs:
            return
        minted_before, reused_before = before
        for index in range(new_blocks):
            # a write with full blocks before its open one is a prefill chunk: park the open block's low row
            block_id, row = self._new_block(open_block=open_last and index == new_blocks - 1, park=new_blocks > 1)
            table.block_ids.append(block_id)
            table.rows.append(row)
        rows = [dst for _, dst in cow_pairs] + (table.rows[-new_blocks:] if new_blocks else [])
        self._emit(RowMint, layer_count=self.num_layers, rows=rows,
                   minted=self.counters.rows_minted - minted_before,
                   reused=self.counters.rows_reused - reused_before)

    def written_rows(self, seq_id: int, start: int, num_tokens: int) -> list[int]:
        """Rows of the blocks covering ``[start, start+num_tokens)``, checking the span was prepared (inside the
        length, every block exclusively owned). Mutates nothing."""
        table = self.table(seq_id)
        _check_int("start", start)
        _check_int("num_tokens", num_tokens, 1)
        if start + num_tokens > table.length:
            raise PoolError(f"sequence {seq_id}: positions [{start}, {start + num_tokens}) are not prepared "
                            f"(length {table.length}); call prepare_write first")
        first, last = start // self.block_size, (start + num_tokens - 1) // self.block_size
        rows = table.rows[first:last + 1]
        counts = self.row_refcount
        shared = [first + i for i, row in enumerate(rows) if counts[row] != 1]
        if shared:
            raise PoolError(f"sequence {seq_id}: blocks {shared} are shared; prepare_write copies them on write "
                            "and must come first")
        return rows

    def reserve(self, lengths: dict[int, int]) -> WritePlan:
        """Hold capacity for the blocks sequences still need to reach ``lengths`` (seq id -> tokens): blocks past
        their tables' ends, plus a shared partial last block their next write copies, plus (under
        ``open_blocks="high"``) the row a sequence not yet written parks when its prefill opens a block. Growth happens
        here, once, instead of at the writes that fill those blocks (each growth is measured, and measuring waits
        for the device: pool/copy_meter.py). Rows stay unminted until a write takes them; capacity never exceeds
        what the budget lets live blocks reach. Mutates capacity (and its modelled growth); returns the growth."""
        if not isinstance(lengths, dict):
            raise PoolError(f"reserve takes {{seq id: tokens}}, got {type(lengths).__name__}")
        for seq_id, num_tokens in lengths.items():
            self.table(seq_id)
            _check_int("reserved length", num_tokens)
        blocks = sum(self._blocks_to_come(self.table(seq_id), num_tokens) for seq_id, num_tokens in lengths.items())
        blocks += self.rows_to_park(lengths)
        self._check_room(blocks)
        growth = self._reserve_capacity(extra_blocks=blocks)
        if growth:  # the capacity held is free rows: a shrink point's "nothing left to release" holds no longer
            self.shrunk = False
        self._emit(Reserve, seqs=list(lengths), lengths=list(lengths.values()))
        return WritePlan(cow_pairs=[], growth=growth)

    def rows_to_park(self, lengths: dict[int, int]) -> int:
        """Rows an ``open_blocks="high"`` book will park for sequences growing to ``lengths`` (seq id -> tokens):
        one per sequence not yet written whose prefill will open a block after full ones (``RowBook._open_row``);
        0 under "low". Reads only."""
        if self.open_blocks != "high":
            return 0
        return sum(1 for seq_id, num_tokens in lengths.items()
                   if self.table(seq_id).length == 0 and num_tokens > self.block_size)

    def _blocks_to_come(self, table: BlockTable, num_tokens: int) -> int:
        """New blocks (rows) a sequence needs to grow from its table to ``num_tokens`` tokens."""
        if num_tokens <= table.length:
            return 0
        shared_tail = table.length % self.block_size != 0 and self.row_refcount[table.rows[-1]] > 1
        return max(0, blocks_for_tokens(num_tokens, self.block_size) - len(table.rows)) + int(shared_tail)

    def release(self, seq_id: int) -> None:
        """Drop the sequence; blocks whose refcount reaches 0 free their rows."""
        table = self.table(seq_id)
        del self.seqs[seq_id]
        self._drop_table(table)
        self._emit(Release, seq=seq_id)

    def clone(self, src_id: int, dst_id: int, num_tokens: int) -> None:
        """New sequence ``dst_id`` sharing (refcount + 1) the blocks covering ``src_id``'s first num_tokens."""
        src = self.table(src_id)
        _check_int("dst_id", dst_id)
        _check_int("num_tokens", num_tokens)
        if dst_id in self.seqs:
            raise PoolError(f"sequence {dst_id} already exists")
        if num_tokens > src.length:
            raise PoolError(f"clone of {num_tokens} tokens exceeds sequence {src_id}'s length {src.length}")
        count = blocks_for_tokens(num_tokens, self.block_size)
        self.seqs[dst_id] = self._share(src, count, num_tokens, min(src.logical_start, num_tokens))
        self._emit(Clone, src=src_id, dst=dst_id, num_tokens=num_tokens)

    def _share(self, table: BlockTable, count: int, length: int, logical_start: int) -> BlockTable:
        shared = table.prefix(count, length, logical_start)
        self._add_refs(shared.rows)
        return shared

    def detach(self, seq_id: int) -> PrefixHandle:
        """Move the sequence's blocks into a pinned handle (references move; refcounts unchanged)."""
        table = self.table(seq_id)
        handle_id = self._next_handle_id
        self._next_handle_id += 1
        del self.seqs[seq_id]
        self.handles[handle_id] = table
        self.version += 1  # row owners change (sequence -> handle)
        self._emit(Detach, seq=seq_id, handle=handle_id)
        return self.prefix_handle(handle_id)

    def adopt(self, handle: PrefixHandle, seq_id: int) -> None:
        """New sequence starting from the handle's blocks (shared; the handle keeps its references)."""
        table = self.handle_table(handle)
        _check_int("seq_id", seq_id)
        if seq_id in self.seqs:
            raise PoolError(f"sequence {seq_id} already exists")
        self.seqs[seq_id] = self._share(table, len(table.rows), table.length, table.logical_start)
        self._emit(Adopt, handle=handle.handle_id, seq=seq_id)

    def release_handle(self, handle: PrefixHandle) -> None:
        table = self.handle_table(handle)
        del self.handles[handle.handle_id]
        self._drop_table(table)
        self._emit(ReleaseHandle, handle=handle.handle_id)

    def trim(self, seq_id: int, num_tokens: int) -> None:
        """Keep the first ``num_tokens`` tokens: a multiple of block_size (or the current length), not below the
        logical start. Blocks past it drop one reference."""
        table = self.table(seq_id)
        _check_int("num_tokens", num_tokens)
        length, start = table.length, table.logical_start
        if num_tokens > length or num_tokens < start:
            raise PoolError(f"trim to {num_tokens} outside sequence {seq_id}'s [{start}, {length}]")
        if num_tokens % self.block_size and num_tokens != length:
            raise PoolError(f"trim to {num_tokens} is not block-aligned (block_size {self.block_size})")
        keep = blocks_for_tokens(num_tokens, self.block_size)
        dropped = BlockTable(table.block_ids[keep:], table.rows[keep:])
        del table.block_ids[keep:], table.rows[keep:]
        table.length = num_tokens
        self._drop_table(dropped)
        self._emit(Trim, seq=seq_id, num_tokens=num_tokens)

    def set_logical_start(self, seq_id: int, logical_start: int) -> None:
        """Hide tokens before ``logical_start`` from gathers (e.g. a sliding window); blocks stay referenced."""
        table = self.table(seq_id)
        _check_int("logical_start", logical_start)
        if logical_start > table.length:
            raise PoolError(f"logical_start {logical_start} past sequence {seq_id}'s length {table.length}")
        table.logical_start = logical_start
        self._emit(SetLogicalStart, seq=seq_id, logical_start=logical_start)

    # ---- shrink (pool/shrink_types.py, pool/book_shrink.py) ---------------------------------------------------
    def shrink(self) -> ShrinkPlan:
        """A shrink point: run the book's shrink policy (``shrink_policy``) now. Moves live blocks down and drops
        released capacity in the bookkeeping (blocks keep ids, refcounts and sharing; every table referencing a
        moved block follows it) and returns the plan for storage to execute. Emits ``block_move`` and
        ``slab_release`` when they happen, then ``shrink`` (always: a replay runs its own policy here)."""
        plan = plan_shrink(self, self.shrink_policy)
        if not plan.empty:
            apply_shrink(self, plan)
            self._emit_shrink(plan)
        self.shrunk = self.design == "slab" or not plan.declined  # a free slab costs no budget to release
        self._emit(ShrinkTick)
        return plan

    def _emit_shrink(self, plan: ShrinkPlan) -> None:
        """The shrink's derived ops; their counts and bytes are over all layers (storage moves and releases the
        same rows in every layer)."""
        layers, bpr = self.num_layers, self.bytes_per_row
        if plan.moves:
            moved = len(plan.moves) * layers
            self._emit(BlockMove, layers=layers, moves=list(plan.moves), count=moved, bytes=moved * bpr)
        if plan.released:
            rows = (plan.old_capacity - plan.capacity) * layers
            self._emit(SlabRelease, layers=layers, count=rows // chunk_rows(self.design, self.slab_blocks),
                       bytes=rows * bpr, capacity_rows=self.capacity, copied_bytes=plan.copied_rows * layers * bpr)

    # ---- figures ---------------------------------------------------------------------------------------------
    def check_integrity(self) -> None:
        """Raise PoolError naming the first broken invariant (see ``pool/book_integrity.py``)."""
        from pool.book_integrity import check_book

        check_book(self)
