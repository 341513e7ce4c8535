"""PagedKVPool: the facade that drives a :class:`pool.bookkeeping.BlockBook` and one storage design.

The bookkeeping decides (block ids, rows, refcounts, copy-on-write, capacity); storage executes (slab appends or
grow-by-copy, slice-update writes, run-wise gathers). This module imports mlx only inside methods that touch
arrays, so ``import pool`` stays mlx-free (the TUI process imports it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from pool.block_table import PrefixHandle
from pool.bookkeeping import BlockBook, OpListener, WritePlan
from pool.config import PoolConfig, blocks_for_tokens, capacity_for, chunk_rows
from pool.errors import PoolError
from pool.fused_decision import DecisionCounters, FusedDecision, decide
from pool.layer_view import LayerView
from pool.limits import MemoryLimits, check_pool_capacity, largest_buffer_elements
from pool.shrink_types import ShrinkReport
from pool.snapshot import SnapshotCache, build_snapshot
from pool.snapshot_types import ObservedFigures, PoolSnapshot
from pool.stats import PoolCounters, PoolStats
from pool.table_match import TableMatch
from pool.token_slots import TokenSlots, check_current, resolve_token_slots


# Bytes a growth window may charge without a copy having happened: allocator transients (see check_integrity)
ALLOCATOR_NOISE_BYTES = 1024


class GatherResult(NamedTuple):
    keys: Any      # mx.array [n_kv_heads, length - logical_start, head_dim], row-contiguous
    values: Any
    num_runs: int  # same-slab runs read (1 for the monolithic design)


@dataclass
class BlockContents:
    """One block's K and V bytes in one layer: mx.arrays [block_size, n_kv_heads, head_dim] (own buffers)."""

    layer: int
    keys: Any
    values: Any


def _make_storage(config: PoolConfig):
    if config.design == "slab":
        from pool.storage_slab import SlabStorage as storage_class
    else:
        from pool.storage_monolithic import MonolithicStorage as storage_class
    return storage_class(config.num_layers, config.block_size, config.slab_blocks)


class PagedKVPool:
    """Chunked-slab (or monolithic) paged KV pool; see docs/contracts.md section 1 and docs/pool.md.

    ``limits``: what the device can hold (pool/limits.py); None measures the default device at the first write
    (pool/device_limits.py). Every allocation is checked against it before it happens."""

    def __init__(self, config: PoolConfig, limits: MemoryLimits | None = None) -> None:
        config.validate()
        self.config = replace(config)  # own copy: set_slab_blocks updates it
        self.book = BlockBook(config.num_layers, config.block_size, config.design, config.slab_blocks,
                              config.max_blocks_per_layer, shrink=config.shrink, open_blocks=config.open_blocks)
        self.storage = _make_storage(config)
        self.table_match = TableMatch(self.book)  # memoised "layers hold equal tables" (fused launch plans)
        self.gathers = 0
        self.gather_runs_total = 0
        self.gather_runs_hist: list[Counter] = [Counter() for _ in range(config.num_layers)]
        self.decisions = DecisionCounters()
        self.snapshot_cache = SnapshotCache()  # per-layer row lists of the last snapshot (clear: a cold one)
        self._snapshot_backend: str | None = None  # the fused-decision backend defaults are computed for
        self.limits = limits
        self.book.limits = limits
        self.cache_release = None  # pool.shrink_exec.CacheRelease: the trim budget after releases (first shrink)

    # ---- configuration and sequences -------------------------------------------------------------------------
    def set_slab_blocks(self, slab_blocks: int) -> None:
        """Rows per slab; only before the first write (PoolError afterwards)."""
        if any(self.storage.has_layer(layer) for layer in range(self.config.num_layers)):
            raise PoolError("set_slab_blocks is allowed only before the first write")
        self.book.set_slab_blocks(slab_blocks)
        self.storage.slab_blocks = slab_blocks
        self.config.slab_blocks = slab_blocks

    def add_op_listener(self, fn: OpListener) -> None:
        """``fn(op)`` for every topology-changing operation (typed ops: ``pool.ops``)."""
        self.book.add_op_listener(fn)

    def add_sequence(self, seq_id: int) -> None:
        self.book.add_sequence(seq_id)

    def seq_length(self, seq_id: int) -> int:
        return self.book.seq_length(seq_id)

    def logical_start(self, seq_id: int) -> int:
        return self.book.logical_start(seq_id)

    def set_logical_start(self, seq_id: int, logical_start: int) -> None:
        self.book.set_logical_start(seq_id, logical_start)

    def sequence_ids(self) -> list[int]:
        return self.book.sequence_ids()

    def block_ids(self, layer: int, seq_id: int) -> list[int]:
        return self.book.block_ids(layer, seq_id)

    def can_allocate(self, num_new_blocks: int) -> bool:
        return self.book.can_allocate(num_new_blocks)

    def release(self, seq_id: int) -> None:
        self.book.release(seq_id)

    def clone(self, src_id: int, dst_id: int, num_tokens: int) -> None:
        self.book.clone(src_id, dst_id, num_tokens)

    def detach(self, seq_id: int) -> PrefixHandle:
        return self.book.detach(seq_id)

    def adopt(self, handle: PrefixHandle, seq_id: int) -> None:
        self.book.adopt(handle, seq_id)

    def release_handle(self, handle: PrefixHandle) -> None:
        self.book.release_handle(handle)

    def trim(self, seq_id: int, num_tokens: int) -> None:
        self.book.trim(seq_id, num_tokens)

    # ---- shrink (pool/shrink_types.py) -------------------------------------------------------------------------
    def shrink(self) -> ShrinkReport:
        """A shrink point (call it between steps: nothing may be mid-write): the bookkeeping runs the pool's shrink
        policy (``config.shrink``: block moves, capacity released; pool/book_shrink.py), storage executes it
        (moves measured, slabs dropped or the monolithic tensor reallocated smaller) and MLX's cache is trimmed
        within its budget (pool/shrink_exec.py). Logged as a ``shrink`` op whatever the policy (``off``: nothing
        else happens); what storage measured copying becomes a ``copied`` op. Returns what it did."""
        plan = self.book.shrink()
        if plan.empty and (self.cache_release is None or not self.cache_release.pending):
            return ShrinkReport(declined=plan.declined)
        from pool.shrink_exec import CacheRelease, execute_shrink

        if self.cache_release is None:
            self.cache_release = CacheRelease()
        report = execute_shrink(self.storage, plan, self.book, self.cache_release)
        if report.bytes_moved:
            self.book.note_measured_copies(0, 0, report.bytes_moved)
        return report

    # ---- writes ----------------------------------------------------------------------------------------------
    def prepare_write(self, seq_id: int, start: int, num_tokens: int) -> None:
        """Bookkeeping half of a write for all layers (see BlockBook.prepare_write), then the storage half of its
        plan: presize every layer that has storage (one step) and copy-on-write the shared blocks' rows."""
        plan = self.book.prepare_write(seq_id, start, num_tokens)
        self._execute(plan)

    def reserve(self, lengths: dict[int, int]) -> None:
        """Grow once, now, to hold the blocks sequences still need to reach ``lengths`` (seq id -> tokens; see
        BlockBook.reserve), so the writes that fill them grow nothing: a growth is measured (copy_meter.py), and
        measuring waits for the device, which would drain a pipelined prefill at every slab it appends."""
        self._execute(self.book.reserve(lengths))

    def rows_to_park(self, lengths: dict[int, int]) -> int:
        """Rows the pool will park for sequences growing to ``lengths`` (BlockBook.rows_to_park; 0 unless
        open_blocks is "high"): part of what ``reserve`` holds."""
        return self.book.rows_to_park(lengths)

    def _execute(self, plan: WritePlan) -> None:
        if not plan.growth and not any(plan.cow_pairs):
            return  # storage already holds the book's capacity (kept equal after every operation)
        # layers with nothing written yet get storage at their first write
        layers = [layer for layer in range(self.config.num_layers) if self.storage.has_layer(layer)]
        # every layer's new slabs in one evaluation, before the copies read them; both steps measured
        self._measured(lambda: (self.storage.grow({layer: self.book.layers[layer].capacity for layer in layers}),
                                self.storage.copy_rows({layer: plan.cow_pairs[layer] for layer in layers})))

    def _grow(self, layer: int) -> None:
        """Storage catches up with one layer's booked capacity (measured)."""
        self._measured(lambda: self.storage.grow({layer: self.book.layers[layer].capacity}))

    def _measured(self, storage_work) -> None:
        """Run ``storage_work`` (growth and/or copy-on-write); what the allocator says it copied becomes a
        ``copied`` op, so recordings rebuild the measured counters exactly."""
        before = self.storage.bytes_copied, self.storage.cow_bytes_copied
        try:
            storage_work()
        finally:
            growth = self.storage.bytes_copied - before[0]
            cow = self.storage.cow_bytes_copied - before[1]
            if growth or cow:
                self.book.note_measured_copies(growth, cow)

    def write(self, layer: int, seq_id: int, start: int, keys, values) -> None:
        """Store K/V ([num_tokens, n_kv_heads, head_dim]) at positions [start, start+num_tokens) of a prepared
        span. The layer's first write fixes its dtype/n_kv_heads/head_dim; later writes must match."""
        from pool.storage_base import geometry_of

        self.book.check_layer(layer)
        geometry = geometry_of(keys, values)
        self.storage.check_geometry(layer, geometry)
        rows = self.book.rows_for_write(layer, seq_id, start, int(keys.shape[0]))
        self._ensure_layer(layer, geometry)
        self.storage.write_span(layer, rows, start % self.config.block_size, keys, values)

    def write_batch(self, layer: int, seq_ids: list[int], starts: list[int], keys, values) -> None:
        """:meth:`write` for several sequences of one layer: ``keys``/``values`` [B, num_tokens, n_kv_heads,
        head_dim], sequence ``seq_ids[i]`` at ``starts[i]``. Stores the same bytes as B calls of ``write``; every
        check (geometry once, each sequence's prepared span) runs before the first store, so an error writes
        nothing."""
        from pool.storage_base import check_batch, geometry_of

        self.book.check_layer(layer)
        check_batch(seq_ids, starts, keys, values)
        # views, not ``keys[i]``: MLX turns an integer index into a Gather that copies the sequence's K/V once more
        # before the slab update copies it in (per layer per prefill chunk); a slice and a squeeze copy nothing
        per_seq = [(keys[i:i + 1].squeeze(0), values[i:i + 1].squeeze(0)) for i in range(len(seq_ids))]
        geometry = geometry_of(*per_seq[0])  # one geometry: check_batch made K and V one shape and dtype
        self.storage.check_geometry(layer, geometry)
        num_tokens = int(keys.shape[1])
        rows = [self.book.rows_for_write(layer, seq_id, start, num_tokens) for seq_id, start in zip(seq_ids, starts)]
        self._ensure_layer(layer, geometry)
        bs = self.config.block_size
        for (k, v), seq_rows, start in zip(per_seq, rows, starts):
            self.storage.write_span(layer, seq_rows, start % bs, k, v)

    def token_slots(self, seq_ids: list[int], positions: list[int]) -> TokenSlots:
        """Resolve where one new token per sequence goes in every layer (positions prepared by prepare_write);
        see ``pool/token_slots.py``. Reads only."""
        return resolve_token_slots(self.book, seq_ids, positions)

    def write_tokens(self, layer: int, slots: TokenSlots, keys, values, indices: dict | None = None) -> None:
        """Store one token per sequence of ``slots`` in ``layer``: ``keys``/``values`` [B, n_kv_heads, head_dim].
        The same bytes as ``write_batch`` with one-token spans, in one scatter per slab touched. ``indices``: a
        dict the caller keeps for one step (device index arrays shared by layers writing the same rows). Checks
        (stale slots, geometry, batch) run before the first store, so an error writes nothing."""
        from pool.storage_base import token_geometry

        self.book.check_layer(layer)
        check_current(self.book, slots, layer)
        geometry = token_geometry(keys, values, len(slots.seq_ids))
        self.storage.check_geometry(layer, geometry)
        self._ensure_layer(layer, geometry)
        self.storage.write_tokens(layer, slots.layer_rows[layer], slots.offsets, keys, values,
                                  {} if indices is None else indices)

    def _ensure_layer(self, layer: int, geometry) -> None:
        """Give ``layer`` storage at its first write (geometry fixed from then on), after checking that the
        capacity the bookkeeping reserved fits the device with this geometry (SizeLimitError, nothing changed)."""
        if self.storage.has_layer(layer):
            return
        self._check_first_write(layer, geometry)
        self.storage.init_layer(layer, geometry)
        if self.book.geometry is None:
            self.book.set_geometry(geometry.dtype, geometry.n_kv_heads, geometry.head_dim,
                                   geometry.bytes_per_row(self.config.block_size))
        self.book.count_layer_bytes(layer, geometry.bytes_per_row(self.config.block_size))
        self._grow(layer)

    def _check_first_write(self, layer: int, geometry, new_row: bool = False) -> None:
        """SizeLimitError unless the booked capacity (plus, with ``new_row``, the row a restore is about to take
        in ``layer``) fits the device with ``geometry`` in the layers that have no storage yet. Mutates nothing
        but the lazily measured ``limits``."""
        if self.limits is None:
            from pool.device_limits import device_limits

            self.limits = self.book.limits = device_limits()
        bs = self.config.block_size
        row_bytes = [self.storage.bytes_per_row(index) if self.storage.has_layer(index) else
                     geometry.bytes_per_row(bs) for index in range(self.config.num_layers)]
        capacities = [rows.capacity for rows in self.book.layers]
        if new_row:
            rows = self.book.layers[layer]
            minted = len(rows.row_block) + (0 if len(rows.free) else 1)
            capacities[layer] = max(rows.capacity, capacity_for(self.config.design, self.config.slab_blocks, minted))
        check_pool_capacity(self.config.design, self.config.slab_blocks, capacities, row_bytes, self.limits,
                            f"the KV pool with {geometry.dtype} [n_kv_heads={geometry.n_kv_heads}, "
                            f"head_dim={geometry.head_dim}] rows")

    # ---- reads -----------------------------------------------------------------------------------------------
    def gather_visible(self, layer: int, seq_id: int) -> GatherResult:
        """K and V of tokens [logical_start, length) as [n_kv_heads, tokens, head_dim]; one read per same-slab run
        of the visible blocks. Records the run count in the layer's histogram."""
        self.book.check_layer(layer)
        table = self.book.tables(seq_id)[layer]
        if not self.storage.has_layer(layer):
            raise PoolError(f"layer {layer} has no storage yet (nothing written to it)")
        bs = self.config.block_size
        first = table.logical_start // bs
        last = blocks_for_tokens(table.length, bs)
        rows = table.rows[first:last]
        if not rows:
            return self._empty_gather(layer)
        lo, hi = table.logical_start - first * bs, table.length - first * bs
        keys, values, runs = self.storage.gather(layer, rows, lo, hi)
        self.gathers += 1
        self.gather_runs_total += runs
        self.gather_runs_hist[layer][runs] += 1
        return GatherResult(keys, values, runs)

    def _empty_gather(self, layer: int) -> GatherResult:
        import mlx.core as mx

        from pool.storage_base import DTYPES

        geometry = self.storage.geometry[layer]
        shape = (geometry.n_kv_heads, 0, geometry.head_dim)
        empty = mx.zeros(shape, dtype=DTYPES[geometry.dtype])
        return GatherResult(empty, empty, 0)

    def read_block(self, block_id: int) -> BlockContents:
        """Copies of a live block's K/V bytes (serialization touch point)."""
        layer, row = self.book.block_location(block_id)
        if not self.storage.has_layer(layer):
            raise PoolError(f"block {block_id}: layer {layer} has no storage yet (never written)")
        keys, values = self.storage.read_row(layer, row)
        return BlockContents(layer, keys, values)

    def restore_block(self, layer: int, contents: BlockContents) -> int:
        """Acquire a fresh block in ``layer`` (held by the caller), write ``contents`` into it, return its id. The
        block is released again if the write fails. Use :meth:`handle_from_blocks` to make restored blocks a
        prefix a sequence can adopt, or :meth:`release_block` to drop them."""
        from pool.storage_base import geometry_of

        self.book.check_layer(layer)
        geometry = geometry_of(contents.keys, contents.values, "block contents", self.config.block_size)
        self.storage.check_geometry(layer, geometry)
        if not self.storage.has_layer(layer):  # sized before the book moves, so a refusal changes nothing
            self._check_first_write(layer, geometry, new_row=True)
        block_id, row, _ = self.book.acquire_block(layer)
        try:
            self._ensure_layer(layer, geometry)
            self._grow(layer)
            self.storage.write_row(layer, row, contents.keys, contents.values)
        except BaseException:
            self.book.release_block(block_id)
            raise
        return block_id

    def release_block(self, block_id: int) -> None:
        self.book.release_block(block_id)

    def handle_from_blocks(self, block_ids: list[list[int]], num_tokens: int) -> PrefixHandle:
        return self.book.handle_from_blocks(block_ids, num_tokens)

    # ---- observation -----------------------------------------------------------------------------------------
    def fused_decision(self, layer: int, *, dtype: str, head_dim: int, batch_size: int,
                       context_len: int | None = None, readiness=None) -> FusedDecision:
        """Fused paged-decode kernel or gather for this layer, and why (pool/fused_decision.py); counted.
        ``readiness(num_slabs)``: the kernel builds' probe (None: ready), see ``fused_decision.decide``."""
        self.book.check_layer(layer)
        decision = decide(num_slabs=self.storage.num_buffers(layer), dtype=dtype, head_dim=head_dim,
                          batch_size=batch_size, context_len=context_len, readiness=readiness,
                          buffer_elements=self._largest_buffer_elements(layer))
        self.decisions.record(layer, decision)
        return decision

    def fused_decisions(self, *, dtype: str, head_dim: int, batch_size: int, context_len: int | None = None,
                        readiness=None) -> list[FusedDecision]:
        """:meth:`fused_decision` for every layer, in layer order, each counted for its layer. What the rule reads
        per layer is its slab count and largest buffer; layers that share them (the usual case: they grow in
        lockstep) share one evaluation, so a decode step runs the rule (environment, backend, registry, readiness
        probe) once instead of once per layer. Mutates only the decision counters."""
        answers: dict[tuple, FusedDecision] = {}
        out = []
        storage = self.storage
        for layer in range(self.config.num_layers):
            # the largest buffer follows from the capacity and geometry: keyed by those, it is worked out once
            key = (storage.num_buffers(layer), storage.capacity_rows(layer), storage.geometry[layer])
            decision = answers.get(key)
            if decision is None:
                decision = answers[key] = decide(num_slabs=key[0], dtype=dtype, head_dim=head_dim,
                                                 batch_size=batch_size, context_len=context_len,
                                                 readiness=readiness,
                                                 buffer_elements=self._largest_buffer_elements(layer))
            self.decisions.record(layer, decision)
            out.append(decision)
        return out

    def _largest_buffer_elements(self, layer: int) -> int | None:
        """Elements of the layer's largest K tensor (what the fused kernel would index), None before its first
        write."""
        geometry = self.storage.geometry[layer]
        if geometry is None:
            return None
        capacity = self.storage.capacity_rows(layer)
        return largest_buffer_elements(self.config.design, self.config.slab_blocks, [capacity], self.config.block_size,
                                       geometry.n_kv_heads, geometry.head_dim)

    def num_buffers(self, layer: int) -> int:
        """Storage tensors a kernel reads for ``layer``: its slabs (slab design), 1 (monolithic), 0 before the
        layer's first write. Reads only."""
        return self.storage.num_buffers(layer) if self.storage.has_layer(layer) else 0

    def stats(self) -> PoolStats:
        layers = self.book.layers
        live = sum(rows.num_live for rows in layers)
        allocated = sum(len(rows.row_block) for rows in layers)
        in_use = sum(rows.num_live * self.storage.bytes_per_row(i) for i, rows in enumerate(layers))
        return PoolStats(allocated_blocks=allocated, live_blocks=live, free_blocks=allocated - live,
                         bytes_reserved=self.storage.bytes_reserved(), bytes_in_use=in_use,
                         num_sequences=len(self.book.seqs), num_handles=len(self.book.handles))

    def live_bytes(self) -> int:
        """K+V bytes of live blocks now: a counter the bookkeeping keeps current (cheap; any thread may read it)."""
        return self.book.bytes_now.live

    def reserved_bytes(self) -> int:
        """K+V bytes of reserved capacity now (counter, like :meth:`live_bytes`)."""
        return self.book.bytes_now.reserved

    def slab_count(self) -> int:
        """Slabs (monolithic: 32-block grow chunks) holding that capacity, summed over layers (counter)."""
        return self.book.bytes_now.slabs

    def counters(self) -> PoolCounters:
        """Growth as measured by storage, the bookkeeping's copy-on-write and row counts, reads and decisions.
        ``bytes_copied``/``cow_bytes_copied`` are measured from MLX's allocator (pool/copy_meter.py); the
        ``*_model`` figures are the bookkeeping's arithmetic beside them."""
        book = self.book.counters
        return PoolCounters(
            slab_appends=self.storage.slab_appends, grow_events=self.storage.grow_events,
            bytes_copied=self.storage.bytes_copied, bytes_copied_model=book.bytes_copied,
            cow_bytes_copied=self.storage.cow_bytes_copied,
            cow_bytes_copied_model=book.cow_copies * self.book.bytes_per_row, cow_copies=book.cow_copies,
            rows_minted=book.rows_minted, rows_reused=book.rows_reused, gathers=self.gathers,
            gather_runs_total=self.gather_runs_total, fused_decisions=self.decisions.fused,
            gather_decisions=self.decisions.gather, slab_releases=book.slab_releases,
            bytes_released=book.bytes_released, blocks_moved=book.blocks_moved, bytes_moved=self.storage.bytes_moved,
            bytes_moved_model=book.bytes_moved)

    def snapshot(self) -> PoolSnapshot:
        """The pool now (docs/contracts.md; pool/snapshot.py has its cost and the fragmentation index). Mutates only
        the snapshot cache."""
        return build_snapshot(self.book, self.observed(), self.snapshot_cache)

    def observed(self) -> ObservedFigures:
        """What a snapshot takes from the running pool beyond the bookkeeping: measured stats and counters, each
        layer's gather-run histogram and its fused decision in force (a default computed now for layers that
        were never asked)."""
        decisions = [self.decisions.last.get(layer) or self._default_decision(layer)
                     for layer in range(self.config.num_layers)]
        return ObservedFigures(self.stats(), self.counters(), [dict(hist) for hist in self.gather_runs_hist],
                               decisions)

    def _default_decision(self, layer: int) -> FusedDecision:
        """What the fused decision would say now for this layer's geometry (not counted as a decision)."""
        geometry = self.storage.geometry[layer]
        if geometry is None:
            return FusedDecision(False, "layer not written yet")
        if self._snapshot_backend is None:
            from pool.fused_decision import detect_backend

            self._snapshot_backend = detect_backend()
        return decide(num_slabs=self.storage.num_buffers(layer), dtype=geometry.dtype, head_dim=geometry.head_dim,
                      batch_size=max(1, len(self.book.seqs)), backend=self._snapshot_backend)

    # ---- the narrow face for kernels, step plans and benchmarks ----------------------------------------------
    def layer_view(self, layer: int, seq_ids=()) -> LayerView:
        """One layer as kernels and step plans read it: the sequences' rows, lengths and logical starts, the K/V
        slab lists and their geometry. Reads only; valid until the pool's next mutation."""
        self.book.check_layer(layer)
        tables = [self.book.tables(seq_id)[layer] for seq_id in seq_ids]
        keys, values = self.storage.keys[layer], self.storage.values[layer]
        return LayerView(layer=layer, seq_ids=tuple(seq_ids), rows=tuple(t.rows for t in tables),
                         lengths=tuple(t.length for t in tables),
                         logical_starts=tuple(t.logical_start for t in tables), block_size=self.config.block_size,
                         design=self.config.design, geometry=self.storage.geometry[layer], keys=tuple(keys),
                         values=tuple(values), rows_per_slab=int(keys[0].shape[0]) if keys else 0)

    def layer_slabs(self, layer: int) -> tuple[list, list]:
        """The layer's K and V tensor lists (the pool's own, no copy): what a fused launch reads once its plan is
        known. Read them, never mutate them, and ask again after the pool changes."""
        self.book.check_layer(layer)
        return self.storage.keys[layer], self.storage.values[layer]

    def layer_key(self, layer: int) -> tuple:
        """(slab count, rows per slab, geometry) of ``layer``: what a launch plan depends on besides the tables
        (``layer_view`` has them too, at the cost of copying every table). Reads only."""
        self.book.check_layer(layer)
        keys = self.storage.keys[layer]
        return len(keys), int(keys[0].shape[0]) if keys else 0, self.storage.geometry[layer]

    def layers_matching(self, ref_layer: int, seq_ids) -> frozenset[int]:
        """Every layer whose tables for ``seq_ids`` equal ``ref_layer``'s (rows, lengths, logical starts), itself
        included; the rows memoised under all layers' row versions (``pool/table_match.py``). Reads only."""
        return self.table_match.matching(ref_layer, seq_ids)

    def book_state(self):
        """The bookkeeping's full state (``pool.book_state.BookState``: keyframes of a recording carry it)."""
        return self.book.state()

    @property
    def geometry(self):
        """The row geometry (``pool.config.LayerGeometry``) fixed by the first write; None before it."""
        return self.book.geometry

    def on_storage_alloc(self, fn) -> None:
        """``fn()`` after every storage allocation is evaluated (a benchmark samples memory there)."""
        self.storage.after_alloc = fn

    def check_integrity(self) -> None:
        """Bookkeeping invariants plus storage agreement: every layer with storage holds exactly the capacity the
        bookkeeping reserved, the live byte counters equal a recount, and the slab design's growth copied
        nothing (measured)."""
        self.book.check_integrity()
        for layer in range(self.config.num_layers):
            if not self.storage.has_layer(layer):
                continue
            real, booked = self.storage.capacity_rows(layer), self.book.layers[layer].capacity
            if real != booked:
                raise PoolError(f"integrity: storage capacity == booked capacity: layer {layer} has {real} rows, "
                                f"bookkeeping reserved {booked}")
        self._check_byte_counters()
        if self.config.design == "slab":
            held = sum(self.storage.num_slabs(layer) for layer in range(self.config.num_layers))
            if held != self.storage.slab_appends - self.storage.slab_releases:
                raise PoolError(f"integrity: storage slabs == appended - released: {held} held, "
                                f"{self.storage.slab_appends} appended, {self.storage.slab_releases} released")
        # Measured, so a tolerance: 1% of every slab ever appended (a shrink may have released the ones a growth was
        # measured on), never less than one slab's K (or V) tensor less a byte (a re-copy of existing slabs copies
        # at least one whole tensor and trips it), nor than ALLOCATOR_NOISE_BYTES: the allocator's own transients
        # inside a growth window, timing-dependent (16 and 64 bytes seen on the CPU in test-sized pools whose whole
        # slab tensor is 64 bytes: Hypothesis seed 10 of tests/pool/test_pool_stateful.py, one full-suite run of
        # tests/pool/test_storage_layout.py)
        appended = self.storage.slab_appends * self.config.slab_blocks * self.book.bytes_per_row
        one_tensor = self.config.slab_blocks * self.book.bytes_per_row // 2
        tolerance = max(appended // 100, one_tensor - 1, ALLOCATOR_NOISE_BYTES)
        if self.config.design == "slab" and self.storage.bytes_copied > tolerance:
            raise PoolError(f"integrity: slab growth copies nothing: {self.storage.bytes_copied} bytes copied "
                            f"(measured; over the {tolerance}-byte tolerance: 1% of the {appended} bytes of slabs "
                            f"appended, one slab tensor of {one_tensor} bytes, allocator noise)")
        if self.gather_runs_total != sum(r * n for hist in self.gather_runs_hist for r, n in hist.items()):
            raise PoolError("integrity: gather run histogram sums to gather_runs_total")

    def _check_byte_counters(self) -> None:
        """The counters the sampler reads (live_bytes, reserved_bytes, slab_count) equal a recount."""
        stats = self.stats()
        per_chunk = chunk_rows(self.config.design, self.config.slab_blocks)
        slabs = sum(self.storage.capacity_rows(layer) // per_chunk for layer in range(self.config.num_layers)
                    if self.storage.has_layer(layer))
        counted = (self.live_bytes(), self.reserved_bytes(), self.slab_count())
        if counted != (stats.bytes_in_use, stats.bytes_reserved, slabs):
            raise PoolError(f"integrity: byte counters == recount: live/reserved/slabs {counted}, recount "
                            f"{(stats.bytes_in_use, stats.bytes_reserved, slabs)}")
