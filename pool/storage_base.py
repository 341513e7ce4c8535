"""Storage shared by both designs: per layer, lists of K and V tensors shaped
``[rows_in_tensor, block_size, n_kv_heads, head_dim]`` and one mapping ``_slab_for_row(row) -> (tensor, row in
tensor)`` that every touch point (write, copy-on-write, gather, block read/restore) goes through.

The slab design keeps many fixed-size tensors (``pool/storage_slab.py``); the monolithic design keeps one that it
grows by copying (``pool/storage_monolithic.py``). Storage never decides which rows to use: the bookkeeping does.
"""

from __future__ import annotations

from typing import Callable

import mlx.core as mx

from pool.config import LayerGeometry
from pool.copy_meter import CopyWindow
from pool.errors import PoolError
from pool.gather_runs import contiguous_range, split_runs

READS_MEMO_ENTRIES = 1024  # gather splits kept (``RowStorage._reads_for``): a few per running sequence

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


def dtype_name(dtype) -> str:
    """'float32' for mx.float32 etc."""
    return str(dtype).rsplit(".", 1)[-1]


def geometry_of(keys, values, what: str = "keys/values", tokens: int | None = None) -> LayerGeometry:
    """Validate a K/V pair shaped [tokens, n_kv_heads, head_dim] and return its geometry (PoolError if bad)."""
    if not isinstance(keys, mx.array) or not isinstance(values, mx.array):
        raise PoolError(f"{what} must be mx.array, got {type(keys).__name__}/{type(values).__name__}")
    if keys.ndim != 3 or keys.shape != values.shape:
        raise PoolError(f"{what} must both be [num_tokens, n_kv_heads, head_dim]; got keys {tuple(keys.shape)}, "
                        f"values {tuple(values.shape)}")
    if keys.dtype != values.dtype or dtype_name(keys.dtype) not in DTYPES:
        raise PoolError(f"{what} dtype must match and be one of {', '.join(DTYPES)}; got "
                        f"{dtype_name(keys.dtype)}/{dtype_name(values.dtype)}")
    if keys.shape[0] < 1 or (tokens is not None and keys.shape[0] != tokens):
        expected = "at least 1" if tokens is None else str(tokens)
        raise PoolError(f"{what} hold {keys.shape[0]} tokens; expected {expected}")
    if keys.shape[1] < 1 or keys.shape[2] < 1:  # a zero dimension would fix a layer's geometry at 0 bytes per row
        raise PoolError(f"{what} need n_kv_heads >= 1 and head_dim >= 1; got {tuple(keys.shape)}")
    return LayerGeometry(dtype_name(keys.dtype), int(keys.shape[1]), int(keys.shape[2]))


_TOKEN_GEOMETRIES: dict[tuple, LayerGeometry] = {}  # (shapes, dtypes, tokens) -> geometry, valid ones only


def token_geometry(keys, values, tokens: int) -> LayerGeometry:
    """``geometry_of(keys, values, tokens=tokens)`` (same checks, same errors), memoised by the arrays' shapes and
    dtypes: a decode step checks one token per sequence in every layer with the same ones, and the full check
    cost ~7 us per layer of host time. Only arrays that passed the check are remembered."""
    if not isinstance(keys, mx.array) or not isinstance(values, mx.array):
        return geometry_of(keys, values, tokens=tokens)
    key = (keys.shape, keys.dtype, values.shape, values.dtype, tokens)
    geometry = _TOKEN_GEOMETRIES.get(key)
    if geometry is None:
        geometry = _TOKEN_GEOMETRIES[key] = geometry_of(keys, values, tokens=tokens)
    return geometry


def check_batch(seq_ids, starts, keys, values) -> None:
    """PoolError unless ``keys`` and ``values`` are mx.arrays of one shape and dtype,
    [len(seq_ids), num_tokens, n_kv_heads, head_dim], with one start per sequence. Every
    dimension of both arrays is compared: MLX indexing does not bound-check, so a ``values`` with fewer sequences
    than ``keys`` would otherwise store memory read past its end."""
    if not isinstance(seq_ids, (list, tuple)) or not isinstance(starts, (list, tuple)):
        raise PoolError(f"write_batch: seq_ids and starts must be lists, got {type(seq_ids).__name__}/"
                        f"{type(starts).__name__}")
    if not isinstance(keys, mx.array) or not isinstance(values, mx.array):
        raise PoolError(f"write_batch: keys/values must be mx.array, got {type(keys).__name__}/"
                        f"{type(values).__name__}")
    batch = len(seq_ids)
    if (batch < 1 or len(starts) != batch or keys.ndim != 4 or keys.shape[0] != batch
            or values.shape != keys.shape or values.dtype != keys.dtype):
        raise PoolError(f"write_batch: keys and values must both be [{batch}, num_tokens, n_kv_heads, head_dim] "
                        f"of one dtype for {batch} sequences and {len(starts)} starts (at least one); got keys "
                        f"{tuple(keys.shape)} {dtype_name(keys.dtype)}, values {tuple(values.shape)} "
                        f"{dtype_name(values.dtype)}")


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
        self.geometry: list[LayerGeometry | None] = [None] * num_layers
        self.slab_appends = 0
        self.grow_events = 0
        self.bytes_copied = 0      # measured by the allocator during growth (pool/copy_meter.py), not modelled
        self.cow_bytes_copied = 0  # measured likewise during copy-on-write
        self.bytes_moved = 0       # measured likewise during a shrink's moves and allocate-smaller-and-copy
        self.slab_releases = 0     # slabs (monolithic: 32-block chunks) given back by shrinks, over layers
        self.after_alloc: Callable[[], None] | None = None  # called after allocations are evaluated (sampling)
        self._window: CopyWindow | None = None  # open while a growth is measured (checkpointed by _allocated)
        self._zero_scalars: dict = {}  # one evaluated 0 per dtype: mx.zeros would allocate a scalar per call
        self._unevaluated: list[mx.array] = []  # tensors allocated since the last materialize()
        self._reads_memo: dict[tuple[int, ...], list[tuple]] = {}  # gather's memo (see _reads_for)
        self._last_spans: tuple | None = None  # write_span's memo (see _spans_for)

    # ---- mapping and capacity (design-specific) --------------------------------------------------------------
    def _slab_for_row(self, row: int) -> tuple[int, int]:
        raise NotImplementedError

    def capacity_rows(self, layer: int) -> int:
        raise NotImplementedError

    def ensure_rows(self, layer: int, rows: int) -> None:
        """Grow ``layer`` so rows ``[0, rows)`` exist (``rows`` is already rounded by the bookkeeping)."""
        raise NotImplementedError

    def release_rows(self, layer: int, rows: int) -> int:
        """Give back capacity so ``layer`` keeps rows ``[0, rows)`` (rounded by the bookkeeping; the rows beyond are
        free). Returns the bytes MLX allocated doing it (measured: a design that copies to shrink)."""
        raise NotImplementedError

    def num_slabs(self, layer: int) -> int:
        return len(self.keys[layer])

    def num_buffers(self, layer: int) -> int:
        """Separate K tensors a kernel would have to address (what the fused decision's multi-slab rule asks)."""
        return len(self.keys[layer])

    # ---- geometry --------------------------------------------------------------------------------------------
    def has_layer(self, layer: int) -> bool:
        return self.geometry[layer] is not None

    def init_layer(self, layer: int, geometry: LayerGeometry) -> None:
        self.geometry[layer] = geometry
        dtype = DTYPES[geometry.dtype]
        if dtype not in self._zero_scalars:  # made here (from host data: already evaluated), outside any window
            self._zero_scalars[dtype] = mx.array(0, dtype=dtype)

    def check_geometry(self, layer: int, geometry: LayerGeometry) -> None:
        """PoolError when a write's geometry differs from the one captured at the layer's first write."""
        fixed = self.geometry[layer]
        if fixed is not None and fixed != geometry:
            raise PoolError(f"layer {layer} stores {fixed.dtype} [n_kv_heads={fixed.n_kv_heads}, "
                            f"head_dim={fixed.head_dim}]; got {geometry.dtype} [n_kv_heads={geometry.n_kv_heads},"
                            f" head_dim={geometry.head_dim}]")

    def bytes_per_row(self, layer: int) -> int:
        geometry = self.geometry[layer]
        return 0 if geometry is None else geometry.bytes_per_row(self.block_size)

    def bytes_reserved(self) -> int:
        return sum(self.capacity_rows(layer) * self.bytes_per_row(layer) for layer in range(self.num_layers))

    def _zeros(self, layer: int, rows: int) -> mx.array:
        """Zero-filled rows (lazy). Filled from a cached zero scalar: ``mx.zeros`` allocates a fresh scalar per
        call, which the copy meter would rightly charge as bytes allocated beyond the new capacity."""
        geometry = self.geometry[layer]
        zero = self._zero_scalars[DTYPES[geometry.dtype]]  # made by init_layer
        return mx.full((rows, *geometry.row_shape(self.block_size)), zero)

    def tensor_lists(self, layers: list[int]) -> list[list[mx.array]]:
        """The K list and the V list of each of ``layers`` (what a copy window evaluates and weighs)."""
        return [tensors for layer in layers for tensors in (self.keys[layer], self.values[layer])]

    def tensors_of(self, layers: list[int]) -> list[mx.array]:
        """Every K and V tensor the storage holds for ``layers``."""
        return [t for tensors in self.tensor_lists(layers) for t in tensors]

    # ---- measured growth and copy-on-write -------------------------------------------------------------------
    def grow(self, capacities: dict[int, int]) -> None:
        """Bring every layer in ``capacities`` to that many rows (``ensure_rows``; rows already rounded by the
        bookkeeping) and evaluate the new storage; add what MLX allocated beyond the added capacity to
        ``bytes_copied`` (pool/copy_meter.py; 0 for a design that copies nothing). Mutates the layers' tensor
        lists and the growth counters."""
        if all(self.capacity_rows(layer) >= rows for layer, rows in capacities.items()):
            return
        layers = list(capacities)
        self._window = window = CopyWindow(lambda: self.tensor_lists(layers))
        try:
            for layer, rows in capacities.items():
                self.ensure_rows(layer, rows)
            if not self.materialize():  # (it checkpoints when it evaluates something)
                window.checkpoint()  # whatever an eager design left lazy (a deferred re-copy) is charged here
        finally:
            self._window = None
            self.bytes_copied += window.copied

    def copy_rows(self, pairs: dict[int, list[tuple[int, int]]]) -> None:
        """Copy-on-write of ``(src, dst)`` row pairs per layer, evaluated; adds what MLX allocated to
        ``cow_bytes_copied`` (one row's K and V staged per pair when the destination slab's buffer is donated)."""
        layers = [layer for layer, layer_pairs in pairs.items() if layer_pairs]
        if not layers:
            return
        # the source index arrays exist before the window opens: the window charges the copies, not their indices
        sources = {src: mx.array([self._slab_for_row(src)[1]]) for layer in layers for src, _ in pairs[layer]}
        mx.eval(list(sources.values()))
        window = CopyWindow(lambda: self.tensor_lists(layers))
        for layer in layers:
            for src, dst in pairs[layer]:
                self.copy_row(layer, src, dst, sources[src])
        window.checkpoint()
        self.cow_bytes_copied += window.copied

    def move_rows(self, pairs: dict[int, list[tuple[int, int]]]) -> int:
        """A shrink's compaction: copy row ``src`` into row ``dst`` for each ``(src, dst)`` pair per layer (the
        bookkeeping already moved the blocks; destinations are free rows below the sources). Per layer and per
        (source tensor, destination tensor) pair: one ``take`` of the source rows (staged and evaluated, so the
        destination's update can donate its buffer even when both are one tensor) and one scatter into the
        destination. Returns the bytes MLX allocated (measured like copy-on-write: the staging, one copy of each
        moved row's K and V) and adds them to ``bytes_moved``."""
        layers = [layer for layer, layer_pairs in pairs.items() if layer_pairs]
        if not layers:
            return 0
        groups = {layer: self._move_groups(pairs[layer]) for layer in layers}
        mx.eval([index for layer in layers for _, _, src, dst in groups[layer] for index in (src, dst)])
        window = CopyWindow(lambda: self.tensor_lists(layers))  # opened after the indices: it charges the copies
        for tensors in (self.keys, self.values):
            self._move_staged(tensors, groups)
            window.checkpoint()  # K's staging is freed before V's: a window charges its peak, so one per kind
        self.bytes_moved += window.copied
        return window.copied

    @staticmethod
    def _move_staged(tensors: list[list[mx.array]], groups: dict[int, list[tuple]]) -> None:
        """Stage every group's source rows (evaluated), then scatter them into their destinations (lazy). The
        staged copies die with this frame, so the window's checkpoint sees them freed."""
        staged = [(layer, dst_slab, dst, mx.take(tensors[layer][src_slab], src, axis=0))
                  for layer, layer_groups in groups.items() for src_slab, dst_slab, src, dst in layer_groups]
        mx.eval([block for *_, block in staged])
        for layer, dst_slab, dst, block in staged:
            tensors[layer][dst_slab][dst] = block

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

    def release(self, capacities: dict[int, int]) -> int:
        """Bring every layer in ``capacities`` down to that many rows (``release_rows``); returns the bytes MLX
        allocated doing it (0 for slabs: dropping a slab copies nothing), also added to ``bytes_moved``."""
        allocated = sum(self.release_rows(layer, rows) for layer, rows in capacities.items()
                        if self.capacity_rows(layer) > rows)
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

    # ---- touch points ----------------------------------------------------------------------------------------
    def write_span(self, layer: int, rows: list[int], offset: int, keys: mx.array, values: mx.array) -> None:
        """Write ``keys``/``values`` ([n, H, D]) starting at token ``offset`` of ``rows[0]`` and continuing through
        ``rows`` in order. Full blocks on consecutive rows of one slab are written with one slice update; partial
        blocks (head/tail) with one each. Each update is assigned back into the slab so MLX can donate its buffer
        (O(written), not O(slab))."""
        block_shape = (self.block_size, *keys.shape[1:])
        for slab, local, lo, hi, span, pos in self._spans_for(rows, offset, int(keys.shape[0])):
            if span:
                store_rows(self.keys[layer], slab, local, keys[lo:hi].reshape(span, *block_shape))
                store_rows(self.values[layer], slab, local, values[lo:hi].reshape(span, *block_shape))
            else:
                self.keys[layer][slab][local, pos:pos + hi - lo] = keys[lo:hi]
                self.values[layer][slab][local, pos:pos + hi - lo] = values[lo:hi]

    def _spans_for(self, rows: list[int], offset: int, total: int) -> list[tuple]:
        """The updates of a ``total``-token write from token ``offset`` of ``rows[0]``: (slab, row in slab, first
        token, end token, full rows or 0, position in the row for a partial block). Memoised for the last write:
        every layer of a step writes the same span of equal tables (they allocate in lockstep), so 27 of 28 layers
        reuse it for one list comparison instead of a Python walk over the rows (host time of a GPU prefill)."""
        last = self._last_spans
        if last is not None and last[0] == (offset, total) and last[1] == rows:
            return last[2]
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
        self._last_spans = ((offset, total), list(rows), spans)
        return spans

    def write_tokens(self, layer: int, rows: tuple[int, ...], offsets: tuple[int, ...], keys: mx.array,
                     values: mx.array, indices: dict) -> None:
        """One token per entry: ``keys``/``values`` [n, H, D], entry i into token ``offsets[i]`` of row ``rows[i]``.
        One scatter per slab touched (a decode step's tail blocks usually share one or two slabs) instead of one
        slice update per entry; each scatter is assigned back into its slab so MLX can donate the slab's buffer.
        ``indices`` caches the device index arrays by (rows, offsets) (the caller's dict, kept for one step: layers
        that write the same rows share them). Mutates the layer's slabs."""
        groups = indices.get((rows, offsets))
        if groups is None:
            groups = indices[rows, offsets] = self._token_groups(rows, offsets)
        for slab, local_rows, token_offsets, picks in groups:
            for tensors, update in ((self.keys[layer], keys), (self.values[layer], values)):
                tensors[slab][local_rows, token_offsets] = _picked(update, picks)

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
        """Copy-on-write: row ``src`` (read from its own slab) into row ``dst``. The source is materialised first so
        the destination slab's update can still donate its buffer when both rows share a slab. ``index``: the
        source's row in its slab as a one-element array, if the caller made it already."""
        src_slab, src_local = self._slab_for_row(src)
        dst_slab, dst_local = self._slab_for_row(dst)
        index = mx.array([src_local]) if index is None else index
        for tensors in (self.keys[layer], self.values[layer]):
            block = mx.take(tensors[src_slab], index, axis=0)
            mx.eval(block)
            store_rows(tensors, dst_slab, dst_local, block)

    def gather(self, layer: int, rows: list[int], lo: int, hi: int) -> tuple[mx.array, mx.array, int]:
        """Tokens [lo, hi) of ``rows`` (in logical order; token 0 is the first token of ``rows[0]``) as K and V
        shaped [H, hi - lo, D], row-contiguous, and the number of runs. One read per maximal same-slab run (a
        slice when the run's rows are consecutive, else a take), viewed as [H, rows, block, D] and joined along
        the rows: the join (for one run, ``mx.contiguous``) is the only copy, and a run costs two graph ops, which
        matters because a prefill chunk gathers every layer (host time per op dominates on a GPU)."""
        reads = self._reads_for(rows)
        geometry = self.geometry[layer]
        heads, dim = geometry.n_kv_heads, geometry.head_dim
        total = len(rows) * self.block_size
        out = []
        for tensors in (self.keys[layer], self.values[layer]):
            parts = []
            for slab, bounds, index in reads:
                part = tensors[slab][bounds[0]:bounds[1]] if index is None else mx.take(tensors[slab], index, axis=0)
                parts.append(part.transpose(2, 0, 1, 3))  # [H, rows, block, D]
            joined = mx.contiguous(parts[0]) if len(parts) == 1 else mx.concatenate(parts, axis=1)
            flat = joined.reshape(heads, total, dim)
            # a partial first/last block is trimmed and copied once more, so the result stays row-contiguous
            out.append(flat if (lo, hi) == (0, total) else mx.contiguous(flat[:, lo:hi]))
        return out[0], out[1], len(reads)

    def _reads_for(self, rows: list[int]) -> list[tuple]:
        """The reads of ``rows``: per same-slab run (slab, (first, stop) slice bounds, or None and a take index).
        Memoised by the rows themselves: a batched decode step gathers every sequence in every layer, and the
        layers of a step read equal tables (they allocate in lockstep), so a memo of the last call alone missed
        at every call of a batch (it alternated between sequences); keyed by the rows' tuple (one C-level copy
        and hash), each sequence's split is walked once and reused by the other layers and by later steps until
        its table changes. A split depends only on the rows and the fixed row mapping, so an entry never goes
        stale; the memo is emptied when it reaches ``READS_MEMO_ENTRIES`` (tables that changed leave dead keys)."""
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

    def read_row(self, layer: int, row: int) -> tuple[mx.array, mx.array]:
        """Copies (own buffers, evaluated) of one row's K and V, [block_size, H, D]."""
        slab, local = self._slab_for_row(row)
        index = mx.array([local])
        keys = mx.take(self.keys[layer][slab], index, axis=0)[0]
        values = mx.take(self.values[layer][slab], index, axis=0)[0]
        mx.eval(keys, values)
        return keys, values

    def write_row(self, layer: int, row: int, keys: mx.array, values: mx.array) -> None:
        """Overwrite one whole row (restore path)."""
        slab, local = self._slab_for_row(row)
        store_rows(self.keys[layer], slab, local, keys[None])
        store_rows(self.values[layer], slab, local, values[None])
