"""KV backends the engine runs a schedule on: the paged pool (slab or monolithic design) and the dense baseline.

Both give the model, for each planned forward pass, a list of per-layer cache objects:
- ``PagedBackend``: ``PagedStep`` caches over a ``PagedKVPool`` (+ optional ``PrefixCache``);
- ``DenseBackend``: mlx-lm's own caches, ``KVCache`` per sequence while it prefills, one ``BatchKVCache`` per
  layer for the decoding batch (joined with ``merge``/``extend``, shrunk with ``filter``), kept in the same
  normalised state (T = longest sequence) the paged adapter reproduces.
The two differ only in where K/V live, which is the comparison slabscope exists to make.
"""

from __future__ import annotations

from mlx_lm.models.cache import BatchKVCache, KVCache

from app.workloads.paged_cache import PagedStep
from app.workloads.scheduler import Sequence


class PagedBackend:
    """Owns a ``PagedKVPool`` and its prefix cache; mutates them per planned step and on admit/release."""

    def __init__(self, pool, *, prefix_cache=None, align_tokens: int = 1):
        self.pool = pool
        self.prefix_cache = prefix_cache
        self.align_tokens = align_tokens  # shared prefixes end on a prefill-chunk boundary (see PrefixCache.attach)
        self._running: dict[int, Sequence] = {}
        self.name = pool.config.design

    def admit(self, seq: Sequence) -> bool:
        """Create ``seq`` in the pool (from a cached prefix when one matches); False if it cannot fit now.

        Admission reserves for the request's *final* length (prompt + max_new_tokens) on top of what the running
        sequences may still grow into, so an admitted request never hits the budget mid-run; cached prefixes
        are evicted (least recently used first) to make room.
        """
        needed = self._final_blocks(seq) + self._outstanding_blocks()
        while not self.pool.can_allocate(needed):
            if self.prefix_cache is None or not self.prefix_cache.evict(1):
                return False
        if self.prefix_cache is None:
            self.pool.add_sequence(seq.seq_id)
        else:
            shared = self.prefix_cache.attach(seq.seq_id, seq.tokens, max_tokens=seq.prefill_end,
                                              align_tokens=self.align_tokens)
            seq.num_cached = seq.num_shared = shared
        self._running[seq.seq_id] = seq
        return True

    def _final_blocks(self, seq: Sequence) -> int:
        return -(-(len(seq.request.prompt) + seq.request.max_new_tokens) // self.pool.config.block_size)

    def _outstanding_blocks(self) -> int:
        """Blocks the running sequences may still need beyond what they hold (0 without a budget)."""
        if self.pool.config.max_blocks_per_layer is None:
            return 0
        held = lambda s: len(self.pool.block_ids(0, s.seq_id))  # noqa: E731
        return sum(max(0, self._final_blocks(s) - held(s)) for s in self._running.values())

    def release(self, seq: Sequence) -> None:
        """Drop a finished sequence; its full blocks go to the prefix cache first (if enabled)."""
        self._running.pop(seq.seq_id, None)
        if self.prefix_cache is not None:
            self.prefix_cache.insert(seq.seq_id, seq.tokens[:seq.num_cached])
        self.pool.release(seq.seq_id)

    def prefill_caches(self, seq: Sequence, start: int, num_tokens: int) -> list:
        return PagedStep(self.pool, [seq.seq_id], [start], num_tokens, batched=False).caches()

    def decode_caches(self, seqs: tuple[Sequence, ...]) -> list:
        return PagedStep(self.pool, [s.seq_id for s in seqs], [s.num_cached for s in seqs], 1,
                         batched=True).caches()

    def check_integrity(self) -> None:
        self.pool.check_integrity()
        if self.prefix_cache is not None:
            self.prefix_cache.check_integrity()

    def live_sequences(self) -> list[int]:
        return list(self.pool.sequence_ids())

    def close(self) -> None:
        if self.prefix_cache is not None:
            self.prefix_cache.clear()


class DenseBackend:
    """mlx-lm's own caches with the same schedule: per-sequence ``KVCache`` lists during prefill, a per-layer
    ``BatchKVCache`` for the decoding batch. Owns ``_prefill`` and ``_batch``/``_batch_ids``."""

    name = "dense"
    pool = None
    prefix_cache = None

    def __init__(self, num_layers: int):
        self.num_layers = num_layers
        self._prefill: dict[int, list[KVCache]] = {}
        self._batch: list[BatchKVCache] | None = None
        self._batch_ids: list[int] = []

    def admit(self, seq: Sequence) -> bool:
        self._prefill[seq.seq_id] = [KVCache() for _ in range(self.num_layers)]
        return True

    def release(self, seq: Sequence) -> None:
        self._prefill.pop(seq.seq_id, None)
        if seq.seq_id in self._batch_ids:
            keep = [i for i, sid in enumerate(self._batch_ids) if sid != seq.seq_id]
            self._batch_ids = [self._batch_ids[i] for i in keep]
            if not keep:
                self._batch = None
            else:
                for cache in self._batch:
                    cache.filter(keep)

    def prefill_caches(self, seq: Sequence, start: int, num_tokens: int) -> list:
        caches = self._prefill[seq.seq_id]
        if caches[0].offset != start:
            raise RuntimeError(f"dense prefill of sequence {seq.seq_id} at {start}, cache holds {caches[0].offset}")
        return caches

    def decode_caches(self, seqs: tuple[Sequence, ...]) -> list:
        ids = [s.seq_id for s in seqs]
        joining = [sid for sid in ids if sid not in self._batch_ids]
        if joining:
            self._join(joining)
        if self._batch_ids != ids:
            raise RuntimeError(f"dense batch order {self._batch_ids} differs from the plan {ids}")
        return self._batch

    def _join(self, seq_ids: list[int]) -> None:
        """Move prefilled sequences into the decoding batch (appended, as the scheduler orders them)."""
        per_layer = [BatchKVCache.merge([self._prefill[sid][layer] for sid in seq_ids])
                     for layer in range(self.num_layers)]
        if self._batch is None:
            self._batch = per_layer
        else:
            for batch, joined in zip(self._batch, per_layer):
                batch.extend(joined)
        self._batch_ids.extend(seq_ids)
        for sid in seq_ids:
            del self._prefill[sid]

    def check_integrity(self) -> None:
        assert len(set(self._batch_ids)) == len(self._batch_ids), "duplicate sequence in the dense batch"
        assert not set(self._batch_ids) & set(self._prefill), "sequence both prefilling and decoding"

    def live_sequences(self) -> list[int]:
        return sorted(set(self._prefill) | set(self._batch_ids))

    def close(self) -> None:
        self._prefill.clear()
        self._batch = None
        self._batch_ids = []
