"""Storage shared by both designs: per layer, lists of K and V tensors shaped
``[rows_in_tensor, n_kv_heads, block_size, head_dim]`` and one mapping ``_slab_for_row(row) -> (tensor, row in
tensor)`` that every touch point (write, copy-on-write, gather, move) goes through.

One row space: every layer holds row ``r`` at the same place, has the same capacity and the same geometry (fixed by
the pool's first write, for every layer at once). So capacity changes, copy-on-write and shrink moves are executed
in every layer, and what a write or a read touches (which tensor, which rows) is worked out once per step from the
rows (``write_layout``) and serves every layer.

The slab design keeps many fixed-size tensors (``pool/storage_slab.py``); the monolithic design keeps one that it
grows by copying (``pool/storage_monolithic.py``). Storage never decides which rows to use: the bookkeeping does.

Surface the pool uses: ``init``/``check_geometry``, ``grow``/``release``/``copy_rows``/``move_rows`` (every layer),
``write(layer, slots, keys, values)``, ``gather(layer, rows, lo, hi)``, ``slabs(layer)``, the capacity and byte
figures and the measured counters.

Head-major rows: within a row each KV head's ``block_size`` tokens are one packed ``[block_size, head_dim]`` matrix
(mlx-lm's caches are ``[B, H, T, D]`` for the same reason). MLX's matmul reads an operand in place only when its
rows are packed, so a prefill chunk's attention reads a run of a slab's rows as a batch of such matrices with no
copy (``pool/prefill_attention.py``); a token-major row would put one head's tokens ``H x D`` apart, and the matmul
would copy every piece of a model with more than one KV head. The write API keeps the model's token-major
``[B, tokens, H, D]``.
"""

from __future__ import annotations

from typing import Callable

import mlx.core as mx
import numpy as np

from pool.config import LayerGeometry
from pool.copy_meter import CopyWindow
from pool.errors import PoolError
from pool.gather_runs import contiguous_range, split_runs

READS_MEMO_ENTRIES = 1024  # gather splits kept (``RowStorage._reads_for``): a few per running sequence

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


def dtype_name(dtype) -> str:
    """'float32' for mx.float32 etc."""
    return str(dtype).rsplit(".", 1)[-1]


def write_geometry(keys, values, batch: int, tokens: int) -> LayerGeometry:
    """Validate a write's K/V pair, both mx.arrays of one shape and dtype ``[batch, tokens, n_kv_heads, head_dim]``,
    and return its row geometry (PoolError naming what is wrong). Every dimension of both arrays is compared: MLX
    indexing does not bound-check, so a ``values`` with fewer sequences than ``keys`` would otherwise store memory
    read past its end. Memoised by the arrays' shapes and dtypes (only shapes that passed): every layer of a step
    writes arrays of one shape, and the full check cost ~7 us per layer of host time."""
    if not isinstance(keys, mx.array) or not isinstance(values, mx.array):
        raise PoolError(f"keys/values must be mx.array, got {type(keys).__name__}/{type(values).__name__}")
    key = (keys.shape, keys.dtype, values.shape, values.dtype, batch, tokens)
    geometry = _WRITE_GEOMETRIES.get(key)
    if geometry is None:
        geometry = _WRITE_GEOMETRIES[key] = _checked_geometry(keys, values, batch, tokens)
    return geometry


_WRITE_GEOMETRIES: dict[tuple, LayerGeometry] = {}  # (shapes, dtypes, batch, tokens) -> geometry, valid ones only


def _checked_geometry(keys, values, batch: int, tokens: int) -> LayerGeometry:
    expected = f"[{batch}, {tokens}, n_kv_heads, head_dim]"
    if keys.ndim != 4 or keys.shape != values.shape or tuple(keys.shape[:2]) != (batch, tokens):
        raise PoolError(f"keys and values must both be {expected} ({batch} sequences of {tokens} tokens); got keys "
                        f"{tuple(keys.shape)}, values {tuple(values.shape)}")
    if keys.dtype != values.dtype or dtype_name(keys.dtype) not in DTYPES:
        raise PoolError(f"keys/values dtype must match and be one of {', '.join(DTYPES)}; got "
                        f"{dtype_name(keys.dtype)}/{dtype_name(values.dtype)}")
    if keys.shape[2] < 1 or keys.shape[3] < 1:  # a zero dimension would fix the geometry at 0 bytes per row
        raise PoolError(f"keys/values need n_kv_heads >= 1 and head_dim >= 1; got {tuple(keys.shape)}")
    return LayerGeometry(dtype_name(keys.dtype), int(keys.shape[2]), int(keys.shape[3]))


def store_rows(tensors: list, index: int, start: int, rows: mx.array) -> None:
    """``tensors[index][start:start + len(rows)] = rows``, always into that tensor's own buffer.

    MLX's ``__setitem__`` turns an assignment that covers a whole array into the assigned value itself: a slab
    written by one full-slab prefill span became a (strided) view of the model's K/V output instead of staying
    the slab's own contiguous buffer, so the slab no longer owned its memory and every fused-kernel launch
    copied it to make it contiguous (on the H200: 3,528 slab copies, ~16 ms, per decode step of a 28-layer
    model). A whole-tensor write therefore goes through ``mx.slice_update``, which writes into the (donated)
    buffer like any partial write."""
    target = tensors[index]
    if start == 0 and rows.shape[0] == target.shape[0]:
        tensors[index] = mx.slice_update(target, rows, mx.array([0]), axes=(0,))
    else:
        target[start:start + rows.shape[0]] = rows


def _picked(update: mx.array, picks) -> mx.array:
    """The entries ``picks`` selects from ``update`` (see ``RowStorage._token_groups``): all (None), a slice
    ((first, stop): a view) or a take (an index array)."""
    if picks is None:
        return update
    return update[picks[0]:picks[1]] if isinstance(picks, tuple) else update[picks]


class RowStorage:
    """Physical K/V rows of every layer. Subclasses define the row mapping, capacity and growth."""

    design = "abstract"

    def __init__(self, num_layers: int, block_size: int, slab_blocks: int) -> None:
        self.num_layers = num_layers
        self.block_size = block_size
        self.slab_blocks = slab_blocks
        self.keys: list[list[mx.array]] = [[] for _ in range(num_layers)]
        self.values: list[list[mx.array]] = [[] for _ in range(num_layers)]
        self.geometry: LayerGeometry | None = None  # every layer's, fixed by the pool's first write
        self.slab_appends = 0      # over layers
        self.grow_events = 0       # over layers
        self.bytes_copied = 0      # measured by the allocator during growth (pool/copy_meter.py), not modelled
        self.cow_bytes_copied = 0  # measured likewise during copy-on-write
        self.bytes_moved = 0       # measured likewise during a shrink's moves and allocate-smaller-and-copy
        self.slab_releases = 0     # slabs (monolithic: 32-block chunks) given back by shrinks, over layers
        self.after_alloc: Callable[[], None] | None = None  # called after allocations are evaluated (sampling)
        self._window: CopyWindow | None = None  # open while a growth is measured (checkpointed by _allocated)
        self._zero_scalar: mx.array | None = None  # one evaluated 0: mx.zeros would allocate a scalar per call
        self._unevaluated: list[mx.array] = []  # tensors allocated since the last materialize()
        self._reads_memo: dict[tuple[int, ...], list[tuple]] = {}  # gather's memo (see _reads_for)
        # Per layer and slab, how many times the slab's tensor may have changed buffer (a write, a copy or move
        # into it, a growth): what the kernels' device tables of slab addresses compare against to refresh only
        # the entries that may be stale (pool/kernels/slab_table.py). Bumped by ``touch``; columns grow by doubling.
        self.slab_stamps = np.zeros((num_layers, 8), dtype=np.int64)
        self.layer_touches = [0] * num_layers  # per layer, ``touch`` calls: a table with nothing new skips the compare
        self.kernel_state: dict = {}  # what the kernels keep per storage (their slab tables); dies with it

    # ---- mapping and capacity (design-specific) --------------------------------------------------------------
    def _slab_for_row(self, row: int) -> tuple[int, int]:
        raise NotImplementedError

    def layer_capacity(self, layer: int) -> int:
        """Rows ``layer``'s tensors hold (every layer holds ``capacity_rows()``: ``check_integrity`` compares)."""
        raise NotImplementedError

    def ensure_rows(self, layer: int, rows: int) -> None:
        """Grow ``layer`` so rows ``[0, rows)`` exist (``rows`` is already rounded by the bookkeeping)."""
        raise NotImplementedError

    def release_rows(self, layer: int, rows: int) -> int:
        """Give back capacity so ``layer`` keeps rows ``[0, rows)`` (rounded by the bookkeeping; the rows beyond are
        free). Returns the bytes MLX allocated doing it (measured: a design that copies to shrink)."""
        raise NotImplementedError

    def capacity_rows(self) -> int:
        """Rows every layer holds (0 before the first write)."""
        return self.layer_capacity(0)

    def num_buffers(self) -> int:
        """Separate K tensors per layer a kernel would have to address: slabs (slab design), 1 (monolithic), 0
        before the first write (what the fused decision's multi-slab rule asks)."""
        return len(self.keys[0])

    def touch(self, layer: int, slabs) -> None:
        """Record that ``slabs`` (indices) of ``layer`` may hold a new buffer: every path that assigns into a slab
        tensor or replaces one calls this (a non-donated write gives the slab a new buffer, so a device table
        entry holding the old address would be stale). Mutates ``slab_stamps`` and ``layer_touches``."""
        stamps = self.slab_stamps
        # plain Python for the usual one slab: numpy's max of a short list and its fancy-indexed increment cost
        # ~10 us together (measured), a scalar increment 0.2 us, and every write of every layer touches
        top = (int(slabs.max()) if isinstance(slabs, np.ndarray) else max(slabs)) + 1 if len(slabs) else 0
        if top > stamps.shape[1]:
            grown = np.zeros((self.num_layers, max(top, 2 * stamps.shape[1])), dtype=np.int64)
            grown[:, :stamps.shape[1]] = stamps
            self.slab_stamps = stamps = grown
        if len(slabs) == 1:
            stamps[layer, int(slabs[0])] += 1
        else:
            stamps[layer, slabs] += 1
        self.layer_touches[layer] += 1

    def slabs(self, layer: int) -> tuple[list[mx.array], list[mx.array]]:
        """The layer's K and V tensor lists (the storage's own: read them, never mutate them)."""
        return self.keys[layer], self.values[layer]

    # ---- geometry --------------------------------------------------------------------------------------------
    @property
    def initialised(self) -> bool:
        return self.geometry is not None

    def init(self, geometry: LayerGeometry) -> None:
        """Fix every layer's row geometry (the pool's first write); capacity comes with the next ``grow``."""
        self.geometry = geometry
        self._zero_scalar = mx.array(0, dtype=DTYPES[geometry.dtype])  # from host data: evaluated, outside windows

    def check_geometry(self, geometry: LayerGeometry) -> None:
        """PoolError when a write's geometry differs from the one the pool's first write fixed."""
        fixed = self.geometry
        if fixed is not None and fixed != geometry:
            raise PoolError(f"the pool stores {fixed.dtype} [n_kv_heads={fixed.n_kv_heads}, "
                            f"head_dim={fixed.head_dim}] in every layer; got {geometry.dtype} "
                            f"[n_kv_heads={geometry.n_kv_heads}, head_dim={geometry.head_dim}]")

    def bytes_per_row(self) -> int:
        """K+V bytes of one row in one layer (0 before the first write)."""
        return 0 if self.geometry is None else self.geometry.bytes_per_row(self.block_size)

    def bytes_reserved(self) -> int:
        """K+V bytes every layer's tensors hold, summed over layers."""
        return sum(self.layer_capacity(layer) for layer in range(self.num_layers)) * self.bytes_per_row()

    def _zeros(self, rows: int) -> mx.array:
        """Zero-filled rows (lazy). Filled from a cached zero scalar: ``mx.zeros`` allocates a fresh scalar per
        call, which the copy meter would rightly charge as bytes allocated beyond the new capacity."""
        return mx.full((rows, *self.geometry.row_shape(self.block_size)), self._zero_scalar)

    def tensor_lists(self) -> list[list[mx.array]]:
        """The K list and the V list of every layer (what a copy window evaluates and weighs)."""
        return [tensors for layer in range(self.num_layers) for tensors in (self.keys[layer], self.values[layer])]

    def tensors(self) -> list[mx.array]:
        """Every K and V tensor the storage holds."""
        return [t for tensors in self.tensor_lists() for t in tensors]

    # ---- measured growth, copy-on-write, moves and releases (every layer) ------------------------------------
    def grow(self, rows: int) -> None:
        """Bring every layer to ``rows`` rows (``ensure_rows``; already rounded by the bookkeeping) and evaluate the
        new storage; add what MLX allocated beyond the added capacity to ``bytes_copied`` (pool/copy_meter.py; 0
        for a design that copies nothing). Mutates the layers' tensor lists and the growth counters."""
        if self.capacity_rows() >= rows:
            return
        self._window = window = CopyWindow(self.tensor_lists)
        try:
            for layer in range(self.num_layers):
                self.ensure_rows(layer, rows)
            if not self.materialize():  # (it checkpoints when it evaluates something)
                window.checkpoint()  # whatever an eager design left lazy (a deferred re-copy) is charged here
        finally:
            self._window = None
            self.bytes_copied += window.copied

    def copy_rows(self, pairs: list[tuple[int, int]]) -> None:
        """Copy-on-write of ``(src, dst)`` row pairs in every layer, evaluated; adds what MLX allocated to
        ``cow_bytes_copied`` (one row's K and V staged per pair and layer when the destination slab's buffer is
        donated)."""
        if not pairs:
            return
        # the source index arrays exist before the window opens: the window charges the copies, not their indices
        sources = {src: mx.array([self._slab_for_row(src)[1]]) for src, _ in pairs}
        mx.eval(list(sources.values()))
        window = CopyWindow(self.tensor_lists)
        for layer in range(self.num_layers):
            for src, dst in pairs:
                self.copy_row(layer, src, dst, sources[src])
        window.checkpoint()
        self.cow_bytes_copied += window.copied

    def move_rows(self, pairs: list[tuple[int, int]]) -> int:
        """A shrink's compaction: copy row ``src`` into row ``dst`` for each ``(src, dst)`` pair in every layer (the
        bookkeeping already moved the blocks; destinations are free rows below the sources). Per layer and per
        (source tensor, destination tensor) pair: one ``take`` of the source rows (staged and evaluated, so the
        destination's update can donate its buffer even when both are one tensor) and one scatter into the
        destination. Returns the bytes MLX allocated (measured like copy-on-write: the staging, one copy of each
        moved row's K and V) and adds them to ``bytes_moved``."""
        if not pairs:
            return 0
        groups = self._move_groups(pairs)  # the same tensors and rows in every layer
        mx.eval([index for _, _, src, dst in groups for index in (src, dst)])
        window = CopyWindow(self.tensor_lists)  # opened after the indices: it charges the copies
        for tensors in (self.keys, self.values):
            for layer, dst_slab in self._move_staged(tensors, groups):
                self.touch(layer, [dst_slab])
            window.checkpoint()  # K's staging is freed before V's: a window charges its peak, so one per kind
        self.bytes_moved += window.copied
        return window.copied

    @staticmethod
    def _move_staged(tensors: list[list[mx.array]], groups: list[tuple]) -> list[tuple[int, int]]:
        """Stage every layer's source rows (evaluated), then scatter them into their destinations (lazy). The staged
        copies die with this frame, so the window's checkpoint sees them freed. Returns the (layer, slab) written."""
        staged = [(layer, dst_slab, dst, mx.take(layer_tensors[src_slab], src, axis=0))
                  for layer, layer_tensors in enumerate(tensors) for src_slab, dst_slab, src, dst in groups]
        mx.eval([block for *_, block in staged])
        for layer, dst_slab, dst, block in staged:
            tensors[layer][dst_slab][dst] = block
        return [(layer, dst_slab) for layer, dst_slab, _, _ in staged]

    def _move_groups(self, pairs: list[tuple[int, int]]) -> list[tuple[int, int, mx.array, mx.array]]:
        """(source tensor, destination tensor, source rows, destination rows) per tensor pair, rows as int32
        arrays in the pairs' order."""
        grouped: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        for src, dst in pairs:
            (src_slab, src_local), (dst_slab, dst_local) = self._slab_for_row(src), self._slab_for_row(dst)
            entry = grouped.setdefault((src_slab, dst_slab), ([], []))
            entry[0].append(src_local)
            entry[1].append(dst_local)
        return [(src_slab, dst_slab, mx.array(src, dtype=mx.int32), mx.array(dst, dtype=mx.int32))
                for (src_slab, dst_slab), (src, dst) in grouped.items()]

    def release(self, rows: int) -> int:
        """Bring every layer down to ``rows`` rows (``release_rows``); returns the bytes MLX allocated doing it (0 for
        slabs: dropping a slab copies nothing), also added to ``bytes_moved``."""
        if self.capacity_rows() <= rows:
            return 0
        allocated = sum(self.release_rows(layer, rows) for layer in range(self.num_layers))
        self.bytes_moved += allocated
        return allocated

    def materialize(self) -> bool:
        """Start evaluating every tensor allocated since the last call (one ``mx.async_eval`` for all layers, not
        one sync per layer), then report the allocation (``_allocated``: the growth's copy window synchronises
        there once to read the allocator). Designs that allocate eagerly have nothing pending. Returns whether
        anything was pending."""
        if not self._unevaluated:
            return False
        pending, self._unevaluated = self._unevaluated, []
        mx.async_eval(pending)
        self._allocated()
        return True

    def _allocated(self) -> None:
        """Allocations were just made: charge them to the open growth window (if any), then let the sampler
        look (``after_alloc``)."""
        if self._window is not None:
            self._window.checkpoint()
        if self.after_alloc is not None:
            self.after_alloc()

    # ---- writes ----------------------------------------------------------------------------------------------
    def write(self, layer: int, slots, keys: mx.array, values: mx.array) -> None:
        """Store ``keys``/``values`` ([B, num_tokens, H, D]) where ``slots`` (``pool.write_slots.WriteSlots``) says,
        in ``layer``. What the write touches is worked out at the first layer's write and kept in
        ``slots.layout`` for the others (``write_layout``). One-token slots: one scatter per slab touched; spans:
        one slice update per run of full blocks on consecutive rows of one slab, one per partial block. Every
        update is assigned back into its slab so MLX can donate the slab's buffer (O(written), not O(slab))."""
        layout = slots.layout.get("storage")
        if layout is None:
            layout = slots.layout["storage"] = self.write_layout(slots)
        if slots.num_tokens == 1:
            batch, _, heads, dim = keys.shape  # [B, 1, H, D] is [B, H, D] in the same element order: a view
            keys, values = keys.reshape(batch, heads, dim), values.reshape(batch, heads, dim)
            for slab, local_rows, token_offsets, picks in layout:
                for tensors, update in ((self.keys[layer], keys), (self.values[layer], values)):
                    # the two index arrays sit apart (row, then token): their [n] dimension leads, as in numpy
                    tensors[slab][local_rows, :, token_offsets] = _picked(update, picks)
            written = slots.layout.get("storage_slabs")
            if written is None:
                written = slots.layout["storage_slabs"] = np.array([group[0] for group in layout], dtype=np.int64)
            self.touch(layer, written)
            return
        batch, tokens, heads, dim = keys.shape
        block_shape = (self.block_size, heads, dim)  # token-major; stored transposed to head-major
        # the batch's tokens in one token axis (sequence after sequence): a span may run across sequences whose rows
        # follow each other (``write_layout``); the reshape is the one copy of the chunk's K/V a span's would make
        flat_keys, flat_values = keys.reshape(batch * tokens, heads, dim), values.reshape(batch * tokens, heads, dim)
        for slab, local, lo, hi, span, pos in layout:
            if span:
                for tensors, flat in ((self.keys[layer], flat_keys), (self.values[layer], flat_values)):
                    store_rows(tensors, slab, local, flat[lo:hi].reshape(span, *block_shape).transpose(0, 2, 1, 3))
            else:
                self.keys[layer][slab][local, :, pos:pos + hi - lo] = flat_keys[lo:hi].transpose(1, 0, 2)
                self.values[layer][slab][local, :, pos:pos + hi - lo] = flat_values[lo:hi].transpose(1, 0, 2)
        written = slots.layout.get("storage_slabs")
        if written is None:
            written = slots.layout["storage_slabs"] = sorted({span[0] for span in layout})
        self.touch(layer, written)

    def write_layout(self, slots) -> list:
        """What ``slots``' writes touch, the same in every layer: for one token per sequence the scatter groups
        (``_token_groups``), else the updates (``_spans``) over the batch's tokens in one axis, sequence after
        sequence, a run of full blocks continuing into the next sequence's where its rows follow in the same slab
        (a batched prefill chunk's sequences take consecutive free rows: one update where there were B)."""
        bs = self.block_size
        if slots.num_tokens == 1:
            return self._token_groups(tuple(rows[0] for rows in slots.rows),
                                      tuple(start % bs for start in slots.starts))
        n, merged = slots.num_tokens, []
        for index, (rows, start) in enumerate(zip(slots.rows, slots.starts)):
            for slab, local, lo, hi, span, pos in self._spans(list(rows), start % bs, n):
                lo, hi = lo + index * n, hi + index * n
                last = merged[-1] if merged else None
                if span and last is not None and last[4] and (last[0], last[1] + last[4], last[3]) == (slab, local, lo):
                    merged[-1] = (slab, last[1], last[2], hi, last[4] + span, 0)
                else:
                    merged.append((slab, local, lo, hi, span, pos))
        return merged

    def _spans(self, rows: list[int], offset: int, total: int) -> list[tuple]:
        """The updates of a ``total``-token write from token ``offset`` of ``rows[0]``: (slab, row in slab, first
        token, end token, full rows or 0, position in the row for a partial block)."""
        bs = self.block_size
        spans = []
        done = index = 0
        while done < total:
            pos = offset if index == 0 else 0
            count = min(bs - pos, total - done)
            slab, local = self._slab_for_row(rows[index])
            if pos == 0 and count == bs:
                span = self._full_block_run(rows, index, (total - done) // bs)
                spans.append((slab, local, done, done + span * bs, span, 0))
                done += span * bs
                index += span
                continue
            spans.append((slab, local, done, done + count, 0, pos))
            done += count
            index += 1
        return spans

    def _token_groups(self, rows: tuple[int, ...], offsets: tuple[int, ...]) -> list[tuple]:
        """[(slab, local rows, token offsets, entry picks)], the index arrays as int32 mx.arrays, slabs in
        first-seen order. Picks: None when the group is every entry in order, (first, stop) when its entries are
        consecutive, else an int32 array. A slice is a view where an index array is a gather: when every sequence's
        tail block sits in its own slab (a burst's sequences prefill one after another), an index array per slab
        made one gather kernel per sequence, K and V, in every layer of every decode step."""
        located = [self._slab_for_row(row) for row in rows]
        by_slab: dict[int, list[int]] = {}
        for i, (slab, _) in enumerate(located):
            by_slab.setdefault(slab, []).append(i)
        groups = []
        for slab, entries in by_slab.items():
            local = mx.array([located[i][1] for i in entries], dtype=mx.int32)
            tokens = mx.array([offsets[i] for i in entries], dtype=mx.int32)
            picks = None if len(entries) == len(rows) else (
                contiguous_range(entries) or mx.array(entries, dtype=mx.int32))
            groups.append((slab, local, tokens, picks))
        return groups

    def _full_block_run(self, rows: list[int], index: int, limit: int) -> int:
        """How many of ``rows[index:index+limit]`` are consecutive rows of one slab."""
        slab, local = self._slab_for_row(rows[index])
        span = 1
        while span < limit and index + span < len(rows) and self._slab_for_row(rows[index + span]) == (
                slab, local + span):
            span += 1
        return span

    def copy_row(self, layer: int, src: int, dst: int, index: mx.array | None = None) -> None:
        """Copy-on-write in one layer: row ``src`` (read from its own slab) into row ``dst``. The source is
        materialised first so the destination slab's update can still donate its buffer when both rows share a
        slab. ``index``: the source's row in its slab as a one-element array, if the caller made it already."""
        src_slab, src_local = self._slab_for_row(src)
        dst_slab, dst_local = self._slab_for_row(dst)
        index = mx.array([src_local]) if index is None else index
        for tensors in (self.keys[layer], self.values[layer]):
            block = mx.take(tensors[src_slab], index, axis=0)
            mx.eval(block)
            store_rows(tensors, dst_slab, dst_local, block)
        self.touch(layer, [dst_slab])

    # ---- reads -----------------------------------------------------------------------------------------------
    def gather(self, layer: int, rows: list[int], lo: int, hi: int) -> tuple[mx.array, mx.array, int]:
        """Tokens [lo, hi) of ``rows`` (in logical order; token 0 is the first token of ``rows[0]``) as K and V
        shaped [H, hi - lo, D], row-contiguous, and the number of runs. One read per maximal same-slab run (a
        slice when the run's rows are consecutive, else a take), viewed as [H, rows, block, D] and joined along
        the rows: the join (for one run, ``mx.contiguous``) is the only copy, and a run costs two graph ops, which
        matters because a prefill chunk gathers every layer (host time per op dominates on a GPU)."""
        reads = self._reads_for(rows)
        heads, dim = self.geometry.n_kv_heads, self.geometry.head_dim
        total = len(rows) * self.block_size
        out = []
        for tensors in (self.keys[layer], self.values[layer]):
            parts = []
            for slab, bounds, index in reads:
                part = tensors[slab][bounds[0]:bounds[1]] if index is None else mx.take(tensors[slab], index, axis=0)
                parts.append(part.transpose(1, 0, 2, 3))  # [H, rows, block, D]
            joined = mx.contiguous(parts[0]) if len(parts) == 1 else mx.concatenate(parts, axis=1)
            flat = joined.reshape(heads, total, dim)
            # a partial first/last block is trimmed and copied once more, so the result stays row-contiguous
            out.append(flat if (lo, hi) == (0, total) else mx.contiguous(flat[:, lo:hi]))
        return out[0], out[1], len(reads)

    def _reads_for(self, rows: list[int]) -> list[tuple]:
        """The reads of ``rows``: per same-slab run (slab, (first, stop) slice bounds, or None and a take index).
        Memoised by the rows themselves, across steps: a decode step gathers every sequence (in every layer it
        does not run fused), and a sequence's rows change only when it opens a block, so its split is walked once
        and reused by the layers and the later steps until then. A split depends only on the rows and the fixed
        row mapping, so an entry never goes stale; the memo is emptied when it reaches ``READS_MEMO_ENTRIES``
        (tables that changed leave dead keys)."""
        key = tuple(rows)
        reads = self._reads_memo.get(key)
        if reads is not None:
            return reads
        reads = []
        for slab, local_rows in split_runs(rows, self._slab_for_row):
            bounds = contiguous_range(local_rows)
            reads.append((slab, bounds, None if bounds is not None else mx.array(local_rows)))
        if len(self._reads_memo) >= READS_MEMO_ENTRIES:
            self._reads_memo.clear()
        self._reads_memo[key] = reads
        return reads
