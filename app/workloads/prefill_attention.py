"""Paged prefill in the live path: the per-chunk route decision and the attention call the paged SDPA makes.

A prefill chunk's ``PagedStep`` (one sequence, ``batched=False``) asks the pool once per chunk
(``PagedKVPool.prefill_decision``: env switch, routable model, batch, history pieces) whether its attention reads
the history in place (``pool/prefill_attention.py``) or gathers it (``gather_visible`` + mlx-lm's SDPA). On the
paged route each layer's ``update_and_fetch`` only writes and hands back the chunk's own K/V; the paged SDPA
(``app/workloads/fused_attention.make_paged_sdpa``) then calls :meth:`PrefillRoute.attention`. A call the route
cannot serve exactly (attention sinks, or a mask other than the plain causal one, e.g. a sliding window) falls back
there and then: the visible K/V are gathered and mlx-lm's own function runs, counted under the fallback's reason.

Decision changes become ``PrefillRouteChange`` events (the backend's ``finish_prefill``), recorded like the decode's
``fused`` events and shown in the Fused view.
"""

from __future__ import annotations

from pool.prefill_pieces import history_pieces
from probes.events import PrefillRouteChange

REASON_FALLBACK_SINKS = "attention sinks: gathered at the call"
REASON_FALLBACK_MASK = "mask other than causal (sliding window?): gathered at the call"


class PrefillRoute:
    """The route of one prefill chunk: ``paged`` (decided once for every layer), the history ``pieces``, the
    layers the paged SDPA served, and the per-step causal mask (built once, shared by the layers)."""

    def __init__(self, step, *, routable: bool):
        # the pool and the sequence, not the step: the step holds this route (``step.prefill``), and a cycle kept
        # every chunk's step (and through it the pool) alive until Python's collector ran
        self.pool, self.seq_ids = step.pool, list(step.seq_ids)
        view = step.view
        per_sequence = [history_pieces(rows, logical_start, start, view.block_size, view.rows_per_slab)
                        for rows, logical_start, start in zip(view.rows, view.logical_starts, step.starts)]
        self.pieces = per_sequence[0] if len(per_sequence) == 1 else []  # the pieces the route reads (one sequence)
        self.decision = step.pool.prefill_decision(pieces=sum(map(len, per_sequence)), batch_size=len(step.seq_ids),
                                                   routable=routable)
        self.paged = self.decision.use_fused
        self.served: set[int] = set()
        self.fallbacks: list[str] = []
        self._mask = None

    def attention(self, layer: int, queries, keys, values, *, scale: float, mask, sinks, original):
        """The chunk's attention in ``layer`` ([B, Hq, L, D]; B > 1 only for a first chunk, no history): in place
        from the slabs, or (sinks, a non-causal mask) gathered and handed to ``original`` (mlx-lm's function).
        Reads the pool; the fallback counts a gather like any other."""
        import mlx.core as mx

        from pool.prefill_attention import causal_mask, paged_prefill_attention, piece_views

        self.served.add(layer)
        pool = self.pool
        if sinks is not None or not (mask is None or (isinstance(mask, str) and mask == "causal")):
            self.fallbacks.append(REASON_FALLBACK_SINKS if sinks is not None else REASON_FALLBACK_MASK)
            results = [pool.gather_visible(layer, seq_id, phase="prefill") for seq_id in self.seq_ids]
            extra = {} if sinks is None else {"sinks": sinks}
            return original(queries, mx.stack([r.keys for r in results]), mx.stack([r.values for r in results]),
                            cache=None, scale=scale, mask=mask, **extra)
        history = []
        if self.pieces:
            key_slabs, value_slabs = pool.slabs(layer)
            # views of the head-major slabs (no copy): metered all the same, so a copy would show as bytes
            views = lambda: [t for pair in piece_views(  # noqa: E731
                key_slabs, value_slabs, self.pieces, pool.config.block_size) for t in pair]
            flat = pool.gather_meter.read("prefill", views, lambda: key_slabs + value_slabs, model_bytes=False)
            history = list(zip(flat[0::2], flat[1::2]))
            if self._mask is None:
                self._mask = causal_mask(queries.shape[2])
        return paged_prefill_attention(queries, keys, values, history, scale=scale, mask=self._mask)

    def check_served(self) -> None:
        """RuntimeError when a layer of a paged chunk was never attended through the paged SDPA (its attention saw
        the chunk's own K/V only)."""
        if not self.paged:
            return
        missed = [layer for layer in range(self.pool.config.num_layers) if layer not in self.served]
        if missed:
            raise RuntimeError(f"paged-prefill layers {missed} were never attended through the paged SDPA: the "
                               "model does not call mlx-lm's scaled_dot_product_attention")


class PrefillEvents:
    """Owns the last emitted prefill route and the events not yet taken (one per change of (paged, reason))."""

    def __init__(self):
        self.last: tuple[bool, str] | None = None
        self.pending: list[PrefillRouteChange] = []

    def note(self, route: PrefillRoute) -> None:
        """Queue an event when the chunk's route (or a fallback at the call) differs from the last one."""
        reasons = [(route.paged, route.decision.reason)] + [(False, reason) for reason in sorted(set(route.fallbacks))]
        for use, reason in reasons:
            if (use, reason) != self.last:
                self.last = (use, reason)
                self.pending.append(PrefillRouteChange(seq_id=route.seq_ids[0], use_paged=use, reason=reason,
                                                       history_pieces=len(route.pieces)))

    def take(self) -> list:
        events, self.pending = self.pending, []
        return events
