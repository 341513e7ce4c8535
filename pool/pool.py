"""PagedKVPool: the facade that drives a :class:`pool.bookkeeping.BlockBook` and one storage design.

The bookkeeping decides (block ids, rows, refcounts, copy-on-write, capacity) over one row space: a row index names
the same block in every layer. Storage executes (slab appends or grow-by-copy in every layer, slice-update writes,
run-wise gathers). A step resolves what it touches once (``write_slots``, ``step_view``) and every layer executes
it (``write``, ``slabs``). This module imports mlx only inside methods that touch arrays, so ``import pool`` stays
mlx-free (the TUI process imports it).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

from pool.block_table import PrefixHandle
from pool.bookkeeping import BlockBook, OpListener, WritePlan
from pool.config import LayerGeometry, PoolConfig, blocks_for_tokens, chunk_rows
from pool.errors import PoolError
from pool.fused_decision import DecisionCounters, FusedDecision, decide
from pool.gather_meter import GatherMeter
from pool.prefill_decision import PrefillDecisionCounters, decide_prefill
from pool.limits import MemoryLimits, check_pool_capacity, largest_buffer_elements
from pool.shrink_types import ShrinkReport
from pool.snapshot import SnapshotCache, build_snapshot
from pool.snapshot_types import ObservedFigures, PoolSnapshot
from pool.stats import PoolBytes, PoolCounters, PoolStats
from pool.step_view import StepView
from pool.write_slots import WriteSlots, check_current, resolve_write_slots

# Bytes a growth window may charge without a copy having happened: allocator transients (see check_integrity)
ALLOCATOR_NOISE_BYTES = 1024


class GatherResult(NamedTuple):
    keys: Any      # mx.array [n_kv_heads, length - logical_start, head_dim], row-contiguous
    values: Any
    num_runs: int  # same-slab runs read (1 for the monolithic design)


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
        if not isinstance(config, PoolConfig):
            raise PoolError(f"a pool is built from a PoolConfig, got {type(config).__name__}")
        config.validate()
        self.config = config
        self.book = BlockBook.from_config(config)
        self.storage = _make_storage(config)
        self.gathers = 0
        self.gather_runs_total = 0
        self.gather_runs_hist: list[Counter] = [Counter() for _ in range(config.num_layers)]
        self.decisions = DecisionCounters()
        self.prefill_decisions = PrefillDecisionCounters()
        self.gather_meter = GatherMeter()  # bytes reads copy, by phase (measuring: off until a run asks)
        self.snapshot_cache = SnapshotCache()  # the row lists of the last snapshot (clear: a cold one)
        self._snapshot_backend: str | None = None  # the fused-decision backend defaults are computed for
        self.limits = limits
        self.book.limits = limits
        self.cache_release = None  # pool.shrink_exec.CacheRelease: the trim budget after releases (first shrink)
        # pool.kernels.table_gather.TableGatherRoute: slab gathers through the slab table, one launch per layer
        # (set by the workload on a backend that has one; None: the storage's per-run gather)
        self.gather_route = None
        # pool.kernels.table_write.TableWriteRoute: a fused layer's decode tokens stored through the slab table
        self.write_route = None

    # ---- sequences and handles (bookkeeping only: storage is untouched) --------------------------------------
    def add_op_listener(self, fn: OpListener) -> None:
        """``fn(op)`` for every topology-changing operation (typed ops: ``pool.ops``)."""
        self.book.add_op_listener(fn)

    def add_sequence(self, seq_id: int) -> None:
        self.book.add_sequence(seq_id)

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

    def set_logical_start(self, seq_id: int, logical_start: int) -> None:
        self.book.set_logical_start(seq_id, logical_start)

    def sequence_ids(self) -> list[int]:
        return self.book.sequence_ids()

    def can_allocate(self, num_new_blocks: int) -> bool:
        return self.book.can_allocate(num_new_blocks)

    # ---- capacity --------------------------------------------------------------------------------------------
    def reserve(self, lengths: dict[int, int]) -> None:
        """Grow once, now, to hold the blocks sequences still need to reach ``lengths`` (seq id -> tokens; see
        BlockBook.reserve), so the writes that fill them grow nothing: a growth is measured (copy_meter.py), and
        measuring waits for the device, which would drain a pipelined prefill at every slab it appends."""
        self._execute(self.book.reserve(lengths))

    def rows_to_park(self, lengths: dict[int, int]) -> int:
        """Rows the pool will park for sequences growing to ``lengths`` (BlockBook.rows_to_park; 0 unless
        open_blocks is "high"): part of what ``reserve`` holds."""
        return self.book.rows_to_park(lengths)

    def shrink(self) -> ShrinkReport:
        """A shrink point (call it between steps: nothing may be mid-write): the bookkeeping runs the pool's shrink
        policy (``config.shrink``: block moves, capacity released; pool/book_shrink.py), storage executes it in
        every layer (moves measured, slabs dropped or the monolithic tensors reallocated smaller) and MLX's cache
        is trimmed within its budget (pool/shrink_exec.py). Logged as a ``shrink`` op whatever the policy
        (``off``: nothing else happens); what storage measured copying becomes a ``copied`` op. Returns what it
        did."""
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
        """Bookkeeping half of a write (see BlockBook.prepare_write), then the storage half of its plan in every
        layer: presize (one step) and copy-on-write the shared blocks' rows."""
        self._execute(self.book.prepare_write(seq_id, start, num_tokens))

    def write_slots(self, seq_ids, starts, num_tokens: int) -> WriteSlots:
        """Where ``num_tokens`` new tokens per sequence go (sequence ``seq_ids[i]`` from position ``starts[i]``,
        prepared by ``prepare_write``), resolved once for every layer (pool/write_slots.py). Reads only."""
        return resolve_write_slots(self.book, seq_ids, starts, num_tokens)

    def write(self, layer: int, slots: WriteSlots, keys, values, *, through_table: bool = False) -> None:
        """Store ``keys``/``values`` ([len(slots.seq_ids), slots.num_tokens, n_kv_heads, head_dim]) in ``layer``
        where ``slots`` say. The pool's first write fixes the geometry (dtype, n_kv_heads, head_dim) of every layer;
        later writes must match. Checks (stale slots, shapes, geometry) run before the first store, so an error
        writes nothing. ``through_table``: the caller's attention reads this layer through the slab table this step
        (the fused kernel or the table gather on the table route, or nothing), so the write may go in place through it
        (``write_route``, pool/kernels/table_write.py)."""
        from pool.storage_base import write_geometry

        self._check_layer(layer)
        if not isinstance(slots, WriteSlots):
            raise PoolError(f"write takes the WriteSlots of write_slots(), got {type(slots).__name__}")
        check_current(self.book, slots)
        geometry = write_geometry(keys, values, len(slots.seq_ids), slots.num_tokens)
        self.storage.check_geometry(geometry)
        if not self.storage.initialised:
            self._init_storage(geometry)
        route = self.write_route
        if through_table and route is not None and route.supports(self.storage):
            route.write(self.storage, layer, slots, keys, values)
        else:
            self.storage.write(layer, slots, keys, values)

    def _execute(self, plan: WritePlan) -> None:
        """Storage catches up with ``plan`` in every layer: every layer's new slabs in one evaluation, before the
        copies read them; both measured. Nothing before the first write (storage gets the booked capacity then)."""
        if plan.empty or not self.storage.initialised:
            return
        self._measured(lambda: (self.storage.grow(self.book.capacity), self.storage.copy_rows(plan.cow_pairs)))

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

    def _init_storage(self, geometry: LayerGeometry) -> None:
        """Give every layer storage at the pool's first write (the geometry fixed from then on), after checking
        that the capacity the bookkeeping reserved fits the device with this geometry (SizeLimitError, nothing
        changed)."""
        if self.limits is None:
            from pool.device_limits import device_limits

            self.limits = self.book.limits = device_limits()
        config = self.config
        check_pool_capacity(config.design, config.slab_blocks, [self.book.capacity] * config.num_layers,
                            geometry.bytes_per_row(config.block_size), self.limits,
                            f"the KV pool with {geometry.dtype} [n_kv_heads={geometry.n_kv_heads}, "
                            f"head_dim={geometry.head_dim}] rows")
        self.storage.init(geometry)
        self.book.set_geometry(geometry.dtype, geometry.n_kv_heads, geometry.head_dim,
                               geometry.bytes_per_row(config.block_size))
        self._measured(lambda: self.storage.grow(self.book.capacity))

    def _check_layer(self, layer: int) -> None:
        if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer < self.config.num_layers:
            raise PoolError(f"layer {layer!r} out of range [0, {self.config.num_layers})")

    # ---- reads -----------------------------------------------------------------------------------------------
    def gather_visible(self, layer: int, seq_id: int, phase: str = "decode") -> GatherResult:
        """K and V of tokens [logical_start, length) as [n_kv_heads, tokens, head_dim]; one read per same-slab run
        of the visible blocks (with a ``gather_route``: one launch through the layer's slab table). Records the run
        count in the layer's histogram and the bytes under ``phase``
        ("prefill" | "decode") in ``gather_meter`` (measured from the allocator when it meters)."""
        self._check_layer(layer)
        table = self.book.table(seq_id)
        if not self.storage.initialised:
            raise PoolError("the pool has no storage yet (nothing written to it)")
        bs = self.config.block_size
        first = table.logical_start // bs
        rows = table.rows[first:blocks_for_tokens(table.length, bs)]
        if not rows:
            return self._empty_gather()
        lo, hi = table.logical_start - first * bs, table.length - first * bs
        found = []

        gather = self.gather_route.gather if self.table_gather_ready() else None

        def read() -> list:
            if gather is not None:
                keys, values, runs = gather(self.storage, layer, rows, lo, hi)
            else:
                keys, values, runs = self.storage.gather(layer, rows, lo, hi)
            found.append(runs)
            return [keys, values]

        keys, values = self.gather_meter.read(phase, read,
                                              lambda: self.storage.keys[layer] + self.storage.values[layer])
        return GatherResult(keys, values, self._count_gathers(layer, found))

    def table_gather_ready(self) -> bool:
        """Whether a history read goes through the slab table now (a ``gather_route`` that supports the storage,
        its kernel built). Once True it stays True for the pool's life: builds only complete. Reads only."""
        route = self.gather_route
        return route is not None and self.storage.initialised and route.supports(self.storage)

    def gather_batch(self, layer: int, seq_ids: list[int], phase: str = "prefill") -> GatherResult | None:
        """K and V of every sequence of ``seq_ids`` as [B, n_kv_heads, tokens, head_dim] in one read of their rows,
        when every one holds the same number of tokens from token 0 (a prefill chunk); None otherwise (the caller
        gathers each). Through the ``gather_route``: one launch straight into that layout. Without the route: one
        storage gather of all rows as one token axis (a partial last block whole: < block_size tokens a sequence
        more), then one copy to the batch layout. Counts a gather and its runs per sequence, as
        ``gather_visible`` does; ``num_runs`` is their sum."""
        self._check_layer(layer)
        tables = [self.book.table(seq_id) for seq_id in seq_ids]
        bs, length = self.config.block_size, tables[0].length
        if not self.storage.initialised or length == 0 or any(t.length != length or t.logical_start for t in tables):
            return None
        blocks = blocks_for_tokens(length, bs)
        per_sequence = [list(t.rows[:blocks]) for t in tables]
        if self.table_gather_ready():
            def read() -> list:
                keys, values, runs = self.gather_route.gather_batch(self.storage, layer, per_sequence, 0, length)
                found.append(runs)
                return [keys, values]
        else:
            def read() -> list:
                found.append(self._runs_of(per_sequence))
                return list(self._flat_batch_gather(layer, per_sequence, length))

        found: list = []
        keys, values = self.gather_meter.read(phase, read,
                                              lambda: self.storage.keys[layer] + self.storage.values[layer])
        return GatherResult(keys, values, self._count_gathers(layer, found[0]))

    def _flat_batch_gather(self, layer: int, per_sequence: list[list[int]], length: int) -> tuple:
        """The storage's gather of every sequence's rows as one token axis, then one copy to [B, H, length, D]."""
        import mlx.core as mx

        bs, count = self.config.block_size, len(per_sequence)
        rows = [row for seq_rows in per_sequence for row in seq_rows]
        keys, values, _ = self.storage.gather(layer, rows, 0, len(rows) * bs)
        heads, dim = keys.shape[0], keys.shape[2]

        def batch(flat):  # [H, B x blocks x block_size, D] -> [B, H, tokens, D], row-contiguous like a dense cache
            return mx.contiguous(flat.reshape(heads, count, len(per_sequence[0]) * bs, dim)[:, :, :length]
                                 .transpose(1, 0, 2, 3))

        return batch(keys), batch(values)

    def _runs_of(self, per_sequence: list[list[int]]) -> list[int]:
        """Same-slab runs of each sequence's rows (1 for the monolithic design's one tensor)."""
        from pool.gather_runs import count_runs

        return [count_runs(seq_rows, self.config.slab_blocks) if self.config.design == "slab" else 1
                for seq_rows in per_sequence]

    def _count_gathers(self, layer: int, runs: list[int]) -> int:
        """Count one gather per sequence read, with its same-slab runs (``runs``, one per sequence) in the layer's
        histogram; returns their sum. Mutates the gather counters."""
        self.gathers += len(runs)
        self.gather_runs_total += sum(runs)
        for count in runs:
            self.gather_runs_hist[layer][count] += 1
        return sum(runs)

    def _empty_gather(self) -> GatherResult:
        import mlx.core as mx

        from pool.storage_base import DTYPES

        geometry = self.storage.geometry
        empty = mx.zeros((geometry.n_kv_heads, 0, geometry.head_dim), dtype=DTYPES[geometry.dtype])
        return GatherResult(empty, empty, 0)

    def step_view(self, seq_ids) -> StepView:
        """The sequences' rows, lengths and logical starts and the slab layout, as one frozen view that serves every
        layer of a step (pool/step_view.py; storage holds what the bookkeeping booked: ``check_integrity``). Reads
        only; PoolError for an unknown sequence."""
        return self.book.step_view(seq_ids)

    def slabs(self, layer: int) -> tuple[list, list]:
        """The layer's K and V tensor lists, each ``[rows_per_slab, n_kv_heads, block_size, head_dim]`` (the pool's
        own, no copy: what a fused launch reads once its plan is known). Read them, never mutate them, and ask
        again after the pool changes."""
        self._check_layer(layer)
        return self.storage.slabs(layer)

    def num_slabs(self) -> int:
        """Tensors a kernel reads per layer: slabs (slab design), 1 (monolithic), 0 before the first write."""
        return self.storage.num_buffers()

    def fused_decision(self, *, dtype: str, head_dim: int, batch_size: int, context_len: int | None = None,
                       readiness=None) -> FusedDecision:
        """The step's fused paged-decode decision (kernel or gather, and why: pool/fused_decision.py), one for every
        layer: layers hold the same slabs of the same geometry. Counted once per layer, as decisions always were.
        ``readiness(num_slabs)``: the kernel builds' probe (None: ready), see ``fused_decision.decide``. Mutates
        only the decision counters."""
        decision = decide(num_slabs=self.storage.num_buffers(), dtype=dtype, head_dim=head_dim, batch_size=batch_size,
                          context_len=context_len, readiness=readiness, buffer_elements=self._largest_buffer_elements())
        self.decisions.record(decision, self.config.num_layers)
        return decision

    def prefill_decision(self, *, pieces: int, batch_size: int, routable: bool) -> FusedDecision:
        """A prefill chunk's attention route (pool/prefill_decision.py), one for every layer, counted once per
        layer. Mutates only the prefill decision counters."""
        decision = decide_prefill(pieces=pieces, batch_size=batch_size, routable=routable)
        self.prefill_decisions.record(decision, self.config.num_layers)
        return decision

    def _largest_buffer_elements(self) -> int | None:
        """Elements of a layer's largest K tensor (what the fused kernel would index), None before the first
        write."""
        geometry = self.storage.geometry
        if geometry is None:
            return None
        return largest_buffer_elements(self.config.design, self.config.slab_blocks, [self.storage.capacity_rows()],
                                       self.config.block_size, geometry.n_kv_heads, geometry.head_dim)

    # ---- figures ---------------------------------------------------------------------------------------------
    def stats(self) -> PoolStats:
        """Rows and bytes over all layers; reserved bytes measured on storage."""
        book, layers = self.book, self.config.num_layers
        live, allocated = book.num_live * layers, len(book.row_block) * layers
        return PoolStats(allocated_blocks=allocated, live_blocks=live, free_blocks=allocated - live,
                         bytes_reserved=self.storage.bytes_reserved(), bytes_in_use=live * self.storage.bytes_per_row(),
                         num_sequences=len(book.seqs), num_handles=len(book.handles))

    def bytes_now(self) -> PoolBytes:
        """Live and reserved K+V bytes and slabs (monolithic: grow chunks), over all layers, from counts the
        bookkeeping keeps current: cheap, and any thread may call it (a read between two updates of one operation
        is at most that operation stale). Zero before the first write (no storage)."""
        if not self.storage.initialised:
            return PoolBytes()
        book, layers = self.book, self.config.num_layers
        row_bytes = book.bytes_per_row * layers
        return PoolBytes(live=book.num_live * row_bytes, reserved=book.capacity * row_bytes,
                         slabs=book.capacity // chunk_rows(self.config.design, self.config.slab_blocks) * layers)

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
            bytes_moved_model=book.bytes_moved, prefill_paged_decisions=self.prefill_decisions.paged,
            prefill_gather_decisions=self.prefill_decisions.gather, **self.gather_meter.counters())

    def snapshot(self) -> PoolSnapshot:
        """The pool now (docs/contracts.md; pool/snapshot.py has its cost and the fragmentation index). Mutates only
        the snapshot cache."""
        return build_snapshot(self.book, self._observed(), self.snapshot_cache)

    def _observed(self) -> ObservedFigures:
        """What a snapshot takes from the running pool beyond the bookkeeping: measured stats and counters, each
        layer's gather-run histogram and the fused decision in force (a default computed now when none was
        asked)."""
        decision = self.decisions.last or self._default_decision()
        return ObservedFigures(self.stats(), self.counters(), [dict(hist) for hist in self.gather_runs_hist],
                               [decision] * self.config.num_layers)

    def _default_decision(self) -> FusedDecision:
        """What the fused decision would say now for the pool's geometry (not counted as a decision)."""
        geometry = self.storage.geometry
        if geometry is None:
            return FusedDecision(False, "layer not written yet")
        if self._snapshot_backend is None:
            from pool.fused_decision import detect_backend

            self._snapshot_backend = detect_backend()
        return decide(num_slabs=self.storage.num_buffers(), dtype=geometry.dtype, head_dim=geometry.head_dim,
                      batch_size=max(1, len(self.book.seqs)), backend=self._snapshot_backend)

    def book_state(self):
        """The bookkeeping's full state (``pool.book_state.BookState``: keyframes of a recording carry it)."""
        return self.book.state()

    @property
    def geometry(self) -> LayerGeometry | None:
        """The row geometry of every layer, fixed by the first write; None before it."""
        return self.book.geometry

    def on_storage_alloc(self, fn) -> None:
        """``fn()`` after every storage allocation is evaluated (a benchmark samples memory there)."""
        self.storage.after_alloc = fn

    def check_integrity(self) -> None:
        """Bookkeeping invariants plus storage agreement: every layer holds exactly the capacity the bookkeeping
        reserved (once storage exists), the byte counters equal a recount, and the slab design's growth copied
        nothing (measured)."""
        self.book.check_integrity()
        storage, booked = self.storage, self.book.capacity
        if storage.initialised:
            real = [storage.layer_capacity(layer) for layer in range(self.config.num_layers)]
            if real != [booked] * self.config.num_layers:
                raise PoolError(f"integrity: every layer's storage holds the booked capacity: layers hold {real} "
                                f"rows, the bookkeeping reserved {booked}")
            if storage.geometry != self.book.geometry:
                raise PoolError(f"integrity: storage geometry == booked geometry: {storage.geometry} vs "
                                f"{self.book.geometry}")
        elif any(storage.keys) or any(storage.values):
            raise PoolError("integrity: no storage tensors before the first write")
        self._check_byte_counters()
        if self.config.design == "slab":
            held = sum(len(storage.keys[layer]) for layer in range(self.config.num_layers))
            if held != storage.slab_appends - storage.slab_releases:
                raise PoolError(f"integrity: storage slabs == appended - released: {held} held, "
                                f"{storage.slab_appends} appended, {storage.slab_releases} released")
        self._check_copies()
        if self.gather_runs_total != sum(r * n for hist in self.gather_runs_hist for r, n in hist.items()):
            raise PoolError("integrity: gather run histogram sums to gather_runs_total")

    def _check_copies(self) -> None:
        """The slab design's growth copied nothing, measured: so a tolerance of 1% of every slab ever appended (a
        shrink may have released the ones a growth was measured on), never less than one slab's K (or V) tensor
        less a byte (a re-copy of existing slabs copies at least one whole tensor and trips it), nor than
        ALLOCATOR_NOISE_BYTES: the allocator's own transients inside a growth window, timing-dependent (16 and 64
        bytes seen on the CPU in test-sized pools whose whole slab tensor is 64 bytes: Hypothesis seed 10 of
        tests/pool/test_pool_stateful.py, one full-suite run of tests/pool/test_storage_layout.py)."""
        if self.config.design != "slab":
            return
        appended = self.storage.slab_appends * self.config.slab_blocks * self.book.bytes_per_row
        one_tensor = self.config.slab_blocks * self.book.bytes_per_row // 2
        tolerance = max(appended // 100, one_tensor - 1, ALLOCATOR_NOISE_BYTES)
        if self.storage.bytes_copied > tolerance:
            raise PoolError(f"integrity: slab growth copies nothing: {self.storage.bytes_copied} bytes copied "
                            f"(measured; over the {tolerance}-byte tolerance: 1% of the {appended} bytes of slabs "
                            f"appended, one slab tensor of {one_tensor} bytes, allocator noise)")

    def _check_byte_counters(self) -> None:
        """The figures the sampler reads (``bytes_now``) equal a recount on storage."""
        stats, storage = self.stats(), self.storage
        per_chunk = chunk_rows(self.config.design, self.config.slab_blocks)
        slabs = sum(storage.layer_capacity(layer) // per_chunk for layer in range(self.config.num_layers))
        now = self.bytes_now()
        counted = (now.live, now.reserved, now.slabs)
        if counted != (stats.bytes_in_use, stats.bytes_reserved, slabs):
            raise PoolError(f"integrity: byte counters == recount: live/reserved/slabs {counted}, recount "
                            f"{(stats.bytes_in_use, stats.bytes_reserved, slabs)}")
