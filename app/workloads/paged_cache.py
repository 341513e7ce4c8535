"""The pool as an mlx-lm model's KV cache: per-layer cache objects backed by a ``PagedKVPool``.

mlx-lm attention modules use four things of a cache: ``offset`` (RoPE position; an int for one sequence, an
``mx.array`` of per-sequence offsets for a batch), ``update_and_fetch(keys, values)`` (store the new K/V, return
everything visible), ``make_mask(N, ...)`` and, for some generation helpers, ``state``/``is_trimmable``. The
adapter below provides exactly those, so llama, qwen3 and every other standard-attention architecture run
unchanged.

Parity with the dense baseline is byte-identical by construction: for a one-sequence prefill step the adapter
mirrors ``mlx_lm.models.cache.KVCache`` (int offset, same mask helper), and for a batched decode step it mirrors
``BatchKVCache`` in the normalised state our scheduler keeps it in (time axis T = longest sequence, shorter
sequences left-padded with zeros, per-sequence offsets, ``create_causal_mask`` with ``left_padding``). Same T,
same padding, same mask -> same attention arithmetic.

Step protocol (owned by ``PagedStep``): the caller creates one ``PagedStep`` per forward pass, which calls
``pool.prepare_write`` once per sequence *before* the model runs (so a budget error happens before any compute
and changes nothing) and resolves the step's write targets once (``pool.write_slots``: every layer holds the same
rows); each layer's ``update_and_fetch`` then calls ``pool.write`` (all sequences at once) and
``pool.gather_visible``.

Fused decode (``PagedStep.set_fused``, decided once per step by ``app.workloads.fused_attention.DecodeDecisions``):
a fused layer's ``update_and_fetch`` only writes (no gather, no padded batch) and hands back the new token's K/V
untouched; the paged SDPA installed in the model's module then calls ``PagedStep.fused_attention``, which runs
the kernel on the layer's slabs through the block tables. The step's one ``pool.step_view`` and the one launch plan
built from it serve every layer (one row space: the tables are the same in every layer by construction).
``check_served`` proves every fused layer's attention went that way (a model that bypassed the paged SDPA would
otherwise attend to one token only).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import mlx.core as mx
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import create_attention_mask

from app.workloads.layer_starts import start_layer
from pool.gather_runs import table_runs, visible_rows


class PagedStep:
    """One forward pass over ``seq_ids``: sequence i writes ``num_tokens`` new tokens at ``starts[i]``.

    ``batched=False`` (sequences that all start at the same position, any number of tokens: a prefill chunk)
    mirrors ``KVCache`` (an int offset, its batch axis holding the sequences); ``batched=True`` (any number of
    sequences, the same number of new tokens each) mirrors ``BatchKVCache``. Construction mutates the pool:
    ``prepare_write`` for every sequence, all-or-nothing (a failure releases nothing it did not create, because
    prepare_write itself changes nothing on failure and earlier sequences' preparations are harmless extensions
    that the next successful step reuses).
    """

    def __init__(self, pool, seq_ids: Sequence[int], starts: Sequence[int], num_tokens: int, *, batched: bool):
        if len(seq_ids) != len(starts) or not seq_ids:
            raise ValueError("seq_ids and starts must be non-empty and of equal length")
        if not batched and len(set(starts)) != 1:
            raise ValueError("an unbatched paged step's sequences all start at the same position")
        self.pool = pool
        self.seq_ids = list(seq_ids)
        self.starts = [int(s) for s in starts]
        self.num_tokens = int(num_tokens)
        self.batched = batched
        for seq_id, start in zip(self.seq_ids, self.starts):
            pool.prepare_write(seq_id, start, self.num_tokens)
        self.slots = pool.write_slots(self.seq_ids, self.starts, self.num_tokens)  # one resolution, every layer
        self._view = None  # pool.step_view of this step (built when first needed; the same for every layer)
        self.lengths = [s + self.num_tokens for s in self.starts]  # visible length after this step
        self.width = max(self.lengths)  # T of the returned K/V (BatchKVCache's _idx after the update)
        self.left_padding = [self.width - n for n in self.lengths]
        self._left_padding_array = mx.array(self.left_padding) if batched else None
        self._offset_array = mx.array(self.starts) if batched else None
        num_layers = pool.config.num_layers
        self.fused = [False] * num_layers  # per layer: attention runs on the fused kernel this step
        self.kernel = None                 # KernelRoute when any layer is fused
        self.served: set[int] = set()      # fused layers whose attention the kernel computed
        self.plans: dict[float, StepPlan] = {}  # the fused launch plan of this step, by softmax scale
        self.prefill = None  # PrefillRoute of a prefill chunk (app/workloads/prefill_attention.py); None: gather

    def set_fused(self, flags: list[bool], kernel) -> None:
        """Mark layers whose attention runs on ``kernel`` (a ``KernelRoute``); only one-token batched decode."""
        if any(flags) and (not self.batched or self.num_tokens != 1):
            raise ValueError("fused attention applies to batched one-token decode steps only")
        if len(flags) != len(self.fused):
            raise ValueError(f"expected {len(self.fused)} per-layer flags, got {len(flags)}")
        self.fused = list(flags)
        self.kernel = kernel if any(flags) else None

    @property
    def view(self):
        """The step's ``pool.step_view`` (rows, lengths, logical starts, slab geometry): one for every layer."""
        if self._view is None:
            self._view = self.pool.step_view(self.seq_ids)
        return self._view

    def caches(self) -> list["PagedLayerCache"]:
        """One cache object per layer, to pass as ``cache=`` to the model."""
        return [PagedLayerCache(self, layer) for layer in range(self.pool.config.num_layers)]

    def make_mask(self, n: int, return_array: bool = False, window_size=None):
        """The mask the matching dense cache would build for ``n`` new tokens."""
        if n != self.num_tokens:
            raise ValueError(f"mask asked for {n} tokens but this step writes {self.num_tokens}")
        if self.batched:
            return create_causal_mask(n, offset=self.width - n, window_size=window_size,
                                      left_padding=self._left_padding_array)
        return create_attention_mask(n, self.starts[0], return_array, window_size)

    @property
    def offset(self):
        return self._offset_array if self.batched else self.starts[0]

    def write_and_gather(self, layer: int, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Store ``keys``/``values`` ([B, H, L, D]) for every sequence and return the visible K/V ([B, H, T, D])."""
        if keys.shape[0] != len(self.seq_ids) or keys.shape[2] != self.num_tokens:
            raise ValueError(f"expected keys [{len(self.seq_ids)}, H, {self.num_tokens}, D], got {keys.shape}")
        # All writes first, then all gathers: a gather is a view of a slab, and a write into a slab that a pending
        # view still references cannot reuse (donate) the slab's buffer, so interleaving them made every write
        # copy its whole slab (monolithic: the whole tensor). Measured: ~30x more time in writes.
        # pool layout is [tokens, heads, dim]; mlx-lm's is [batch, heads, tokens, dim]: one transpose per batch,
        # and one pool call per layer (geometry checked once), not one per sequence
        if self.num_tokens == 1:
            batch, heads, _, dim = keys.shape  # one token: [B, H, 1, D] is [B, 1, H, D] in the same element order
            # a fused layer on the table route reads the layer through the table the write hands on
            through_table = self.fused[layer] and getattr(self.kernel, "reads_table", False)
            self.pool.write(layer, self.slots, keys.reshape(batch, 1, heads, dim),
                            values.reshape(batch, 1, heads, dim), through_table=through_table)
        else:
            self.pool.write(layer, self.slots, keys.transpose(0, 2, 1, 3), values.transpose(0, 2, 1, 3),
                            through_table=self._chunk_reads_through_table())
        if self.fused[layer] or (self.prefill is not None and self.prefill.paged):
            return keys, values  # the kernel / paged prefill reads the slabs itself (fused_attention.py)
        if not self.batched and (len(self.seq_ids) > 1 or self.pool.gather_route is not None):
            # a prefill chunk's histories in one read (through the slab table: straight into [B, H, T, D])
            result = self.pool.gather_batch(layer, self.seq_ids, "prefill")
            if result is not None:
                return result.keys, result.values
        gathered = []
        phase = "decode" if self.batched else "prefill"
        for seq_id in self.seq_ids:
            result = self.pool.gather_visible(layer, seq_id, phase)
            gathered.append((result.keys, result.values))
        # The pool hands back row-contiguous [H, T, D] arrays: exactly the layout of a dense cache's [B, H, T, D]
        # (SDPA's CPU path sums in a different order for other layouts: measured, not byte-equal). One sequence
        # without padding is used as is; a batch is copied right-aligned into a zero-filled buffer (zeros =
        # BatchKVCache's left padding; measured cheaper than pad-then-stack).
        if len(gathered) == 1 and self.left_padding[0] == 0:
            k, v = gathered[0]
            return k[None], v[None]
        if not any(self.left_padding):  # a prefill chunk of sequences at the same start: no padding to fill
            return mx.stack([k for k, _ in gathered]), mx.stack([v for _, v in gathered])
        return _padded_batch([k for k, _ in gathered], self.width), _padded_batch([v for _, v in gathered], self.width)

    def _chunk_reads_through_table(self) -> bool:
        """Whether every read of the slabs in this prefill chunk goes through the slab table (the table gather, now
        ready: readiness never goes back), or there is none (a first chunk): then its writes may go in place through
        the table (pool/kernels/table_write.py). A paged chunk reading history pieces reads slab views through MLX
        operations, which would not wait for a write MLX does not see."""
        if self.batched or (self.prefill is not None and self.prefill.paged and self.prefill.pieces):
            return False
        return self.pool.table_gather_ready()

    def fused_attention(self, layer: int, queries: mx.array, scale: float) -> mx.array:
        """Attention of this step's one query token per sequence ([B, Hq, 1, D]) by the fused kernel, reading
        the K/V written by ``write_and_gather`` straight from the layer's slabs. Reads the pool only."""
        if not self.fused[layer]:
            raise RuntimeError(f"layer {layer} is not in fused mode this step")
        if queries.shape[0] != len(self.seq_ids) or queries.shape[2] != 1:
            raise ValueError(f"expected queries [{len(self.seq_ids)}, Hq, 1, D], got {queries.shape}")
        self.served.add(layer)
        kernel = self.kernel
        if not kernel.accepts_plan:
            return kernel.run(self.pool, layer, self.seq_ids, queries, scale=scale, backend=kernel.backend)
        entry = self.plans.get(float(scale))
        if entry is None:  # the first fused layer: one plan for every layer (the same rows in all of them)
            entry = self.plans[float(scale)] = StepPlan.of(self.view, scale)
        # the plan's prepared launch serves every layer it fits (slab count and shapes: checked per launch)
        launches = {"launches": entry.launches} if kernel.accepts_launches else {}
        return kernel.run(self.pool, layer, self.seq_ids, queries, scale=scale, backend=kernel.backend,
                          plan=entry.plan, meta=entry.meta, **launches)

    def check_served(self) -> None:
        """RuntimeError if a fused layer's attention did not go through the paged SDPA (after the forward)."""
        missed = [layer for layer, fused in enumerate(self.fused) if fused and layer not in self.served]
        if missed:
            raise RuntimeError(f"fused layers {missed} were never attended through the paged SDPA: the model "
                               "does not call mlx-lm's scaled_dot_product_attention")

    def run_counts(self) -> tuple[list[int], list[int]]:
        """Same-slab runs per sequence this step: (layer 0, max over layers). Every layer holds the same rows, so
        both are the runs of the step view's tables (what a gather or the kernel reads over the visible blocks)."""
        config, view = self.pool.config, self.view
        runs = [table_runs(visible_rows(rows, start, length, config.block_size), config.design, config.slab_blocks)
                for rows, start, length in zip(view.rows, view.logical_starts, view.lengths)]
        return runs, list(runs)


class StepPlan(NamedTuple):
    """The fused launch plan of one step (``pool.kernels.plan.DecodePlan``), its ``meta`` as an ``mx.array`` and
    ``launches``, the dict the kernel fills with the launch it prepares at the first layer
    (``pool.kernels.paged_decode_cuda.CudaLaunch``: checks, variant lookup, shapes, grid) for the others."""

    plan: object
    meta: object
    launches: dict

    @classmethod
    def of(cls, view, scale: float) -> "StepPlan":
        from pool.kernels.paged_decode import plan_for_view

        plan = plan_for_view(view, scale=scale)
        return cls(plan, mx.array(plan.meta), {})


def _padded_batch(parts: list[mx.array], width: int) -> mx.array:
    """[B, H, width, D] zeros with part i ([H, T_i, D]) copied right-aligned into row i."""
    heads, _, dim = parts[0].shape
    out = mx.zeros((len(parts), heads, width, dim), dtype=parts[0].dtype)
    for i, part in enumerate(parts):
        out[i, :, width - part.shape[1]:, :] = part
    return out


class PagedLayerCache:
    """What one mlx-lm attention layer sees: offset, update_and_fetch, make_mask; storage lives in the pool."""

    def __init__(self, step: PagedStep, layer: int):
        self.step = step
        self.layer = layer

    @property
    def offset(self):
        return self.step.offset

    @property
    def fused(self) -> bool:
        return self.step.fused[self.layer]

    @property
    def prefill_paged(self) -> bool:
        """This layer's prefill chunk reads its history in place (the paged SDPA calls ``step.prefill``)."""
        return self.step.prefill is not None and self.step.prefill.paged

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        visible_keys, visible_values = self.step.write_and_gather(self.layer, keys, values)
        if self.step.num_tokens > 1:  # a prefill chunk: this layer goes to the device now (layer_starts.py)
            start_layer(visible_keys, visible_values)
        return visible_keys, visible_values

    def make_mask(self, n: int, return_array: bool = False, window_size=None, **_):
        return self.step.make_mask(n, return_array=return_array, window_size=window_size)

    def is_trimmable(self) -> bool:
        return False  # trimming is a pool operation (pool.trim), not something a model step may do

    @property
    def state(self):
        # generation helpers evaluate ``cache.state``; the pool's storage is what must be materialised
        return []

    def empty(self) -> bool:
        return False
