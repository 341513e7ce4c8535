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
from pool.book_rows import LayerRows, OpListener, RowBook, WritePlan
from pool.book_state import BookState
from pool.config import blocks_for_tokens, chunk_rows
from pool.errors import PoolError
from pool.ops import (Adopt, AddSequence, BlockMove, Clone, CopyOnWrite, Detach, PrepareWrite, Release, ReleaseHandle,
                      Reserve, RowMint, SetLogicalStart, ShrinkTick, SlabRelease, Trim)

__all__ = ["BlockBook", "LayerRows", "OpListener", "WritePlan"]


def _check_int(name: str, value, minimum: int = 0) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise PoolError(f"{name} must be an int >= {minimum}, got {value!r}")


class BlockBook(RowBook):
    """Sequences, handles and loose blocks on top of :class:`RowBook`'s rows and refcounts."""

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
        """Register an empty sequence (no blocks yet) in every layer."""
        _check_int("seq_id", seq_id)
        if seq_id in self.seqs:
            raise PoolError(f"sequence {seq_id} already exists")
        self.seqs[seq_id] = [BlockTable() for _ in range(self.num_layers)]
        self._emit(AddSequence, seq=seq_id)

    def sequence_ids(self) -> list[int]:
        return list(self.seqs)

    def seq_length(self, seq_id: int) -> int:
        return self.tables(seq_id)[0].length

    def logical_start(self, seq_id: int) -> int:
        return self.tables(seq_id)[0].logical_start

    def block_rows(self, layer: int, seq_id: int) -> list[int]:
        """The sequence's physical rows in ``layer``, logical order (a copy)."""
        self.check_layer(layer)
        return list(self.tables(seq_id)[layer].rows)

    def block_ids(self, layer: int, seq_id: int) -> list[int]:
        self.check_layer(layer)
        return list(self.tables(seq_id)[layer].block_ids)

    def prepare_write(self, seq_id: int, start: int, num_tokens: int) -> WritePlan:
        """Make tokens ``[start, start+num_tokens)`` writable in every layer: extend the tables, copy-on-write
        shared blocks in the span (new block + row, one reference moved off the original), mint/reuse rows,
        reserve capacity. Mutates tables, rows, refcounts, capacity and counters; returns what storage must do."""
        tables = self.tables(seq_id)
        _check_int("start", start)
        _check_int("num_tokens", num_tokens, 1)
        length = tables[0].length
        if start > length:
            raise PoolError(f"sequence {seq_id}: write start {start} is past its length {length} (no gaps)")
        first, last = start // self.block_size, (start + num_tokens - 1) // self.block_size
        if self._inside_exclusive_blocks(tables, first, last):
            # the common decode case (the span lies in blocks the sequence already owns alone): nothing to copy,
            # mint or reserve, only the lengths move; every layer is still checked
            for table in tables:
                table.length = max(length, start + num_tokens)
            self._emit(PrepareWrite, seq=seq_id, start=start, num_tokens=num_tokens)
            return WritePlan(cow_pairs=[[] for _ in tables], growth=[])
        cow_indices = [self._shared_in_span(layer, table, first, last) for layer, table in enumerate(tables)]
        new_blocks = max(0, last + 1 - len(tables[0].rows))
        for layer in range(self.num_layers):
            self._check_budget(layer, len(cow_indices[layer]) + new_blocks)
        self._check_room([len(cow) + new_blocks for cow in cow_indices])
        before = (self.counters.rows_minted, self.counters.rows_reused)
        cow_pairs = [self._copy_on_write(seq_id, layer, tables[layer], cow_indices[layer])
                     for layer in range(self.num_layers)]
        self._extend(tables, new_blocks, cow_pairs, before, open_last=(start + num_tokens) % self.block_size != 0)
        for table in tables:
            table.length = max(length, start + num_tokens)
        growth = self._reserve_capacity()
        self._emit(PrepareWrite, seq=seq_id, start=start, num_tokens=num_tokens)
        return WritePlan(cow_pairs=cow_pairs, growth=growth)

    def _inside_exclusive_blocks(self, tables: list[BlockTable], first: int, last: int) -> bool:
        """True when blocks ``first..last`` exist in every layer's table and each has refcount 1."""
        if last >= len(tables[0].rows):
            return False
        # plain loops, not a generator: every decode step asks this once per sequence for every layer
        for rows_state, table in zip(self.layers, tables):
            counts, rows = rows_state.row_refcount, table.rows
            for index in range(first, last + 1):
                if counts[rows[index]] != 1:
                    return False
        return True

    def _shared_in_span(self, layer: int, table: BlockTable, first: int, last: int) -> list[int]:
        counts = self.layers[layer].row_refcount
        return [i for i in range(first, min(last + 1, len(table.rows))) if counts[table.rows[i]] > 1]

    def _copy_on_write(self, seq_id: int, layer: int, table: BlockTable, indices: list[int]) -> list[tuple]:
        pairs = []
        for index in indices:
            src_row = table.rows[index]
            block_id, row = self._new_block(layer)
            self._drop_refs(layer, [src_row])  # refcount was > 1: never frees
            table.block_ids[index], table.rows[index] = block_id, row
            pairs.append((src_row, row))
        self.counters.cow_copies += len(pairs)
        if layer == 0:
            for index in indices:
                self._emit(CopyOnWrite, seq=seq_id, logical_block=index, num_layers=self.num_layers)
        return pairs

    def _extend(self, tables: list[BlockTable], new_blocks: int, cow_pairs: list[list[tuple]],
                before: tuple[int, int], open_last: bool = False) -> None:
        """Append ``new_blocks`` blocks to every layer's table; ``open_last``: the write leaves the last one partly
        filled (its row is the open block's: ``RowBook._open_row``)."""
        if not new_blocks and not any(cow_pairs):
            return
        minted_before, reused_before = before
        for layer, table in enumerate(tables):
            for index in range(new_blocks):
                # a write with full blocks before its open one is a prefill chunk: park the open block's low row
                block_id, row = self._new_block(layer, open_block=open_last and index == new_blocks - 1,
                                                park=new_blocks > 1)
                table.block_ids.append(block_id)
                table.rows.append(row)
        rows0 = [dst for _, dst in cow_pairs[0]] + (tables[0].rows[-new_blocks:] if new_blocks else [])
        self._emit(RowMint, layer_count=self.num_layers, rows=rows0,
                   minted=self.counters.rows_minted - minted_before,
                   reused=self.counters.rows_reused - reused_before)

    def rows_for_write(self, layer: int, seq_id: int, start: int, num_tokens: int) -> list[int]:
        """Rows of the blocks covering ``[start, start+num_tokens)`` in one layer, checking the span was prepared
        (inside the length, every block exclusively owned). Mutates nothing."""
        self.check_layer(layer)
        table = self.tables(seq_id)[layer]
        _check_int("start", start)
        _check_int("num_tokens", num_tokens, 1)
        if start + num_tokens > table.length:
            raise PoolError(f"sequence {seq_id}: positions [{start}, {start + num_tokens}) are not prepared "
                            f"(length {table.length}); call prepare_write first")
        first, last = start // self.block_size, (start + num_tokens - 1) // self.block_size
        rows = table.rows[first:last + 1]
        counts = self.layers[layer].row_refcount
        shared = [first + i for i, row in enumerate(rows) if counts[row] != 1]
        if shared:
            raise PoolError(f"sequence {seq_id} layer {layer}: blocks {shared} are shared; prepare_write "
                            f"copies them on write and must come first")
        return rows

    def reserve(self, lengths: dict[int, int]) -> WritePlan:
        """Hold capacity, in every layer, for the blocks sequences still need to reach ``lengths`` (seq id -> tokens):
        blocks past their tables' ends, plus a shared partial last block their next write copies, plus (under
        ``open_blocks="high"``) the row a sequence not yet written parks when its prefill opens a block. Growth happens
        here, once, instead of at the writes that fill those blocks (each growth is measured, and measuring waits
        for the device: pool/copy_meter.py). Rows stay unminted until a write takes them; capacity never exceeds
        what the budget lets live blocks reach. Mutates capacity (and its modelled growth); returns the growth."""
        if not isinstance(lengths, dict):
            raise PoolError(f"reserve takes {{seq id: tokens}}, got {type(lengths).__name__}")
        for seq_id, num_tokens in lengths.items():
            self.tables(seq_id)
            _check_int("reserved length", num_tokens)
        blocks = sum(self._blocks_to_come(self.tables(seq_id)[0], num_tokens) for seq_id, num_tokens in lengths.items())
        blocks += self.rows_to_park(lengths)
        self._check_room([blocks] * self.num_layers)
        growth = self._reserve_capacity(extra_blocks=blocks)
        if growth:  # the capacity held is free rows: a shrink point's "nothing left to release" holds no longer
            self.shrunk = False
        self._emit(Reserve, seqs=list(lengths), lengths=list(lengths.values()))
        return WritePlan(cow_pairs=[[] for _ in range(self.num_layers)], growth=growth)

    def rows_to_park(self, lengths: dict[int, int]) -> int:
        """Rows an ``open_blocks="high"`` book will park for sequences growing to ``lengths`` (seq id -> tokens):
        one per sequence not yet written whose prefill will open a block after full ones (``RowBook._open_row``);
        0 under "low". Reads only."""
        if self.open_blocks != "high":
            return 0
        return sum(1 for seq_id, num_tokens in lengths.items()
                   if self.tables(seq_id)[0].length == 0 and num_tokens > self.block_size)

    def _blocks_to_come(self, table: BlockTable, num_tokens: int) -> int:
        """New blocks (rows) a sequence needs to grow from its table to ``num_tokens`` tokens (layer 0's table:
        layers allocate in lockstep)."""
        if num_tokens <= table.length:
            return 0
        shared_tail = table.length % self.block_size != 0 and self.layers[0].row_refcount[table.rows[-1]] > 1
        return max(0, blocks_for_tokens(num_tokens, self.block_size) - len(table.rows)) + int(shared_tail)

    def release(self, seq_id: int) -> None:
        """Drop the sequence; blocks whose refcount reaches 0 free their rows."""
        tables = self.tables(seq_id)
        del self.seqs[seq_id]
        self._drop_tables(tables)
        self._emit(Release, seq=seq_id)

    def clone(self, src_id: int, dst_id: int, num_tokens: int) -> None:
        """New sequence ``dst_id`` sharing (refcount + 1) the blocks covering ``src_id``'s first num_tokens."""
        src = self.tables(src_id)
        _check_int("dst_id", dst_id)
        _check_int("num_tokens", num_tokens)
        if dst_id in self.seqs:
            raise PoolError(f"sequence {dst_id} already exists")
        if num_tokens > src[0].length:
            raise PoolError(f"clone of {num_tokens} tokens exceeds sequence {src_id}'s length {src[0].length}")
        count = blocks_for_tokens(num_tokens, self.block_size)
        start = min(src[0].logical_start, num_tokens)
        self.seqs[dst_id] = self._share(src, count, num_tokens, start)
        self._emit(Clone, src=src_id, dst=dst_id, num_tokens=num_tokens)

    def _share(self, tables: list[BlockTable], count: int, length: int, logical_start: int) -> list[BlockTable]:
        shared = [table.prefix(count, length, logical_start) for table in tables]
        for layer, table in enumerate(shared):
            self._add_refs(layer, table.rows)
        return shared

    def detach(self, seq_id: int) -> PrefixHandle:
        """Move the sequence's blocks into a pinned handle (references move; refcounts unchanged)."""
        tables = self.tables(seq_id)
        handle_id = self._next_handle_id
        self._next_handle_id += 1
        del self.seqs[seq_id]
        self.handles[handle_id] = tables
        for layer in range(self.num_layers):
            self.versions[layer] += 1  # row owners change (sequence -> handle)
        self._emit(Detach, seq=seq_id, handle=handle_id)
        return self.prefix_handle(handle_id)

    def adopt(self, handle: PrefixHandle, seq_id: int) -> None:
        """New sequence starting from the handle's blocks (shared; the handle keeps its references)."""
        tables = self.handle_tables(handle)
        _check_int("seq_id", seq_id)
        if seq_id in self.seqs:
            raise PoolError(f"sequence {seq_id} already exists")
        self.seqs[seq_id] = self._share(tables, len(tables[0].rows), tables[0].length, tables[0].logical_start)
        self._emit(Adopt, handle=handle.handle_id, seq=seq_id)

    def release_handle(self, handle: PrefixHandle) -> None:
        tables = self.handle_tables(handle)
        del self.handles[handle.handle_id]
        self._drop_tables(tables)
        self._emit(ReleaseHandle, handle=handle.handle_id)

    def trim(self, seq_id: int, num_tokens: int) -> None:
        """Keep the first ``num_tokens`` tokens: a multiple of block_size (or the current length), not below the
        logical start. Blocks past it drop one reference."""
        tables = self.tables(seq_id)
        _check_int("num_tokens", num_tokens)
        length, start = tables[0].length, tables[0].logical_start
        if num_tokens > length or num_tokens < start:
            raise PoolError(f"trim to {num_tokens} outside sequence {seq_id}'s [{start}, {length}]")
        if num_tokens % self.block_size and num_tokens != length:
            raise PoolError(f"trim to {num_tokens} is not block-aligned (block_size {self.block_size})")
        keep = blocks_for_tokens(num_tokens, self.block_size)
        dropped = [BlockTable(t.block_ids[keep:], t.rows[keep:]) for t in tables]
        for table in tables:
            del table.block_ids[keep:], table.rows[keep:]
            table.length = num_tokens
        self._drop_tables(dropped)
        self._emit(Trim, seq=seq_id, num_tokens=num_tokens)

    def set_logical_start(self, seq_id: int, logical_start: int) -> None:
        """Hide tokens before ``logical_start`` from gathers (e.g. a sliding window); blocks stay referenced."""
        tables = self.tables(seq_id)
        _check_int("logical_start", logical_start)
        if logical_start > tables[0].length:
            raise PoolError(f"logical_start {logical_start} past sequence {seq_id}'s length {tables[0].length}")
        for table in tables:
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
        moved = sum(len(moves) for moves in plan.moves)
        if moved:
            self._emit(BlockMove, layers=sum(1 for moves in plan.moves if moves), moves=list(plan.moves[0]),
                       count=moved, bytes=moved * self.bytes_per_row)
        released = plan.released_layers()
        if released:
            chunk = chunk_rows(self.design, self.slab_blocks)
            rows = sum(old - new for _, old, new in released)
            self._emit(SlabRelease, layers=len(released), count=rows // chunk, bytes=rows * self.bytes_per_row,
                       capacity_rows=self.layers[0].capacity,
                       copied_bytes=sum(plan.copied_rows) * self.bytes_per_row)

    # ---- loose blocks (serialization restore path) -----------------------------------------------------------
    def acquire_block(self, layer: int) -> tuple[int, int, list]:
        """A fresh block in one layer, referenced once by the caller. Returns (block id, row, growth)."""
        self.check_layer(layer)
        self._check_budget(layer, 1)
        self._check_room([int(index == layer) for index in range(self.num_layers)])
        block_id, row = self._new_block(layer)
        self.loose.add(block_id)
        return block_id, row, self._reserve_capacity()

    def release_block(self, block_id: int) -> None:
        """Drop the caller's reference to a block obtained from :meth:`acquire_block`."""
        layer, row = self.block_location(block_id)
        if block_id not in self.loose:
            raise PoolError(f"block {block_id} is not held by the caller (only restored blocks can be released)")
        self.loose.discard(block_id)
        self._drop_refs(layer, [row])

    def handle_from_blocks(self, block_ids: list[list[int]], num_tokens: int) -> PrefixHandle:
        """Turn caller-held blocks (one list per layer, logical order) into an adoptable prefix handle."""
        _check_int("num_tokens", num_tokens)
        count = blocks_for_tokens(num_tokens, self.block_size)
        if len(block_ids) != self.num_layers or any(len(ids) != count for ids in block_ids):
            raise PoolError(f"need {self.num_layers} lists of {count} block ids for {num_tokens} tokens")
        flat = [b for ids in block_ids for b in ids]
        if len(set(flat)) != len(flat) or not all(b in self.loose for b in flat):
            raise PoolError("every block must be a distinct block held by the caller (from restore_block)")
        if any(self.blocks[b][0] != layer for layer, ids in enumerate(block_ids) for b in ids):
            raise PoolError("block ids must be listed under the layer they were restored in")
        tables = [BlockTable(list(ids), [self.blocks[b][1] for b in ids], num_tokens, 0) for ids in block_ids]
        self.loose.difference_update(flat)
        handle_id = self._next_handle_id
        self._next_handle_id += 1
        self.handles[handle_id] = tables
        return self.prefix_handle(handle_id)

    # ---- figures ---------------------------------------------------------------------------------------------
    def live_rows(self, layer: int) -> int:
        return self.layers[layer].num_live

    def check_integrity(self) -> None:
        """Raise PoolError naming the first broken invariant (see ``pool/book_integrity.py``)."""
        from pool.book_integrity import check_book

        check_book(self)
