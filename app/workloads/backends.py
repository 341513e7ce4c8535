"""KV backends the engine runs a schedule on: the paged pool (slab or monolithic design) and the dense baseline.

Both give the model, for each planned forward pass, a list of per-layer cache objects:
- ``PagedBackend``: ``PagedStep`` caches over a ``PagedKVPool`` (+ optional ``PrefixCache``), with the fused
  paged-decode decision taken per layer at every decode step (``DecodeDecisions``);
- ``DenseBackend``: mlx-lm's own caches, ``KVCache`` per sequence while it prefills, one ``BatchKVCache`` per
  layer for the decoding batch (joined with ``merge``/``extend``, shrunk with ``filter``), kept in the same
  normalised state (T = longest sequence) the paged adapter reproduces.
The two differ only in where K/V live, which is the comparison slabscope exists to make. Both keep a
conversation's K/V between turns (``app.workloads.conversations``) so ``multiturn`` runs the same schedule on both.

``finish_decode()`` (called by the engine after each decode forward pass) returns the step's events: ``fused``
on a layer's decision change and one ``gather`` event with the same-slab runs per sequence (paged only).
"""

from __future__ import annotations

from mlx_lm.models.cache import BatchKVCache, KVCache

from app.workloads.conversations import DenseConversations, PagedConversations
from app.workloads.layer_starts import PrefillKVCache
from app.workloads.paged_cache import PagedStep
from app.workloads.scheduler import Sequence
from app.workloads.shrink_points import run_shrink_point
from probes.events import GatherRuns


class PagedBackend:
    """Owns a ``PagedKVPool`` and its prefix cache; mutates them per planned step and on admit/release."""

    def __init__(self, pool, *, prefix_cache=None, align_tokens: int = 1, decisions=None, kernel=None,
                 reserve_ahead: bool = False, prefill_routable: bool = False):
        from app.workloads.prefill_attention import PrefillEvents

        self.pool = pool
        # the paged SDPA is installed in the model's module: prefill chunks may read their history in place
        self.prefill_routable = prefill_routable
        self.prefill_events = PrefillEvents()
        self._prefill_route = None  # the last prefill chunk's route (finish_prefill checks it was served)
        # grow once per admission round for the running sequences' final lengths (``_reserve_admitted``) instead
        # of at the prefill chunks and decode steps that fill the pool
        self.reserve_ahead = reserve_ahead
        self._reserve_due = False
        self.prefix_cache = prefix_cache
        self.align_tokens = align_tokens  # shared prefixes end on a prefill-chunk boundary (see PrefixCache.attach)
        self.decisions = decisions  # DecodeDecisions (None: always gather, no decision asked)
        self.kernel = kernel        # KernelRoute the fused layers run on
        if kernel is not None and pool.config.design == "slab" and pool.gather_route is None:
            from pool.kernels.table_gather import gather_route

            pool.gather_route = gather_route(kernel.backend)  # history gathers through the slab table
        if kernel is not None and kernel.reads_table and pool.config.design == "slab" and pool.write_route is None:
            from pool.kernels.table_write import write_route

            pool.write_route = write_route(kernel.backend)  # fused layers' decode tokens through the slab table
        self.conversations = PagedConversations(pool)
        self._running: dict[int, Sequence] = {}
        self._decode_step: PagedStep | None = None
        self.name = pool.config.design

    def admit(self, seq: Sequence) -> bool:
        """Create ``seq`` in the pool (from a cached prefix when one matches); False if it cannot fit now.

        Admission reserves for the request's *final* length (prompt + max_new_tokens) on top of what the running
        sequences may still grow into, so an admitted request never hits the budget mid-run; cached prefixes
        are evicted (least recently used first) to make room.
        """
        # full blocks of a resumed conversation are shared, not allocated (its partial block is copied: counted)
        shared = self.conversations.resumable_tokens(seq) // self.pool.config.block_size
        needed = self._final_blocks(seq) - shared + self._outstanding_blocks()
        while not self.pool.can_allocate(needed):
            if self.prefix_cache is None or not self.prefix_cache.evict(1):
                return False
        resumed = self.conversations.adopt(seq)
        if resumed:
            seq.num_cached = seq.num_shared = resumed
        elif self.prefix_cache is None:
            self.pool.add_sequence(seq.seq_id)
        else:
            shared = self.prefix_cache.attach(seq.seq_id, seq.tokens, max_tokens=seq.prefill_end,
                                              align_tokens=self.align_tokens)
            seq.num_cached = seq.num_shared = shared
        self._running[seq.seq_id] = seq
        self._reserve_due = self.reserve_ahead
        self._prefetch_projected()
        return True

    def _reserve_admitted(self) -> None:
        """After an admission round, before the next forward pass: hold capacity for every running sequence's
        final length (its cache never holds the last sampled token) in one pool growth. Each growth is measured,
        and measuring waits for the device (pool/copy_meter.py): growing at every slab a prefill fills drained
        the GPU's prefill pipeline dozens of times per burst; now a burst admitted together grows once."""
        if not self._reserve_due:
            return
        self._reserve_due = False
        self.pool.reserve({s.seq_id: s.request.final_cached_tokens for s in self._running.values()})

    def _prefetch_projected(self) -> None:
        """Queue the fused kernels for the slab count the running sequences will reach at their final lengths
        (kernels compile in the background while they prefill, so decode finds them built)."""
        if self.kernel is None or self.pool.config.design != "slab":
            return
        blocks = sum(self._final_blocks(s) for s in self._running.values())
        blocks += self.pool.rows_to_park({s.seq_id: s.request.final_cached_tokens for s in self._running.values()})
        self.kernel.prefetch(-(-blocks // self.pool.config.slab_blocks), projected=True)

    def _final_blocks(self, seq: Sequence) -> int:
        return -(-(len(seq.request.prompt) + seq.request.max_new_tokens) // self.pool.config.block_size)

    def _outstanding_blocks(self) -> int:
        """Blocks the running sequences may still need beyond what they hold (0 without a budget)."""
        if self.pool.config.max_blocks_per_layer is None:
            return 0
        bs = self.pool.config.block_size
        # a resumed conversation's shared partial block is not really held: its first write copies it
        pending_copy = lambda s: int(s.num_shared % bs != 0 and s.num_cached == s.num_shared)  # noqa: E731
        running = list(self._running.values())
        view = self.pool.step_view([s.seq_id for s in running])
        return sum(max(0, self._final_blocks(s) - (len(rows) - pending_copy(s))) for s, rows in zip(running, view.rows))

    def release(self, seq: Sequence) -> None:
        """Drop a finished sequence; its full blocks go to the prefix cache first (if enabled); a conversation
        turn with a follow-up is detached into a handle instead of released (see conversations.py)."""
        self._running.pop(seq.seq_id, None)
        if self.prefix_cache is not None:
            self.prefix_cache.insert(seq.seq_id, seq.tokens[:seq.num_cached])
        self.conversations.keep_or_release(seq)

    def prefill_caches(self, seqs: tuple[Sequence, ...], start: int, num_tokens: int) -> list:
        """Per-layer caches of one prefill chunk: every sequence of ``seqs`` writes ``num_tokens`` from ``start``."""
        self._reserve_admitted()
        step = PagedStep(self.pool, [seq.seq_id for seq in seqs], [start] * len(seqs), num_tokens, batched=False)
        from app.workloads.prefill_attention import PrefillRoute

        step.prefill = self._prefill_route = PrefillRoute(step, routable=self.prefill_routable)
        if self.kernel is not None:  # the pool may just have appended a slab: build the next kernels meanwhile
            self.kernel.prefetch(self.pool.num_slabs())
        return step.caches()

    def decode_caches(self, seqs: tuple[Sequence, ...], starts: list[int] | None = None) -> list:
        """Prepare one decode step and take the per-layer fused decisions (after prepare_write: the slab count
        is the one the kernel will see). ``starts``: write positions (default ``num_cached``; the engine passes
        ``num_cached + 1`` when it builds a step before recording the previous one's tokens)."""
        starts = [s.num_cached for s in seqs] if starts is None else starts
        self._reserve_admitted()
        step = PagedStep(self.pool, [s.seq_id for s in seqs], starts, 1, batched=True)
        if self.decisions is not None:
            context = max(n - start for n, start in zip(step.lengths, step.view.logical_starts))
            step.set_fused(self.decisions.decide(len(seqs), context), self.kernel)
        self._decode_step = step
        return step.caches()

    def finish_prefill(self) -> list:
        """Events of the prefill chunk just built (``prefill_route`` changes); checks that every layer of a paged
        chunk attended through the paged SDPA."""
        route, self._prefill_route = self._prefill_route, None
        if route is None:
            return []
        route.check_served()
        self.prefill_events.note(route)
        return self.prefill_events.take()

    def finish_decode(self) -> list:
        """Events of the decode step just run (``fused`` changes, then one ``gather``); checks that every fused
        layer's attention went through the kernel."""
        step, self._decode_step = self._decode_step, None
        events = []
        if self.decisions is not None:
            events, self.decisions.events = self.decisions.events, []
        if step is None:
            return events
        step.check_served()
        first, most = step.run_counts()
        events.append(GatherRuns(seq_ids=list(step.seq_ids), runs_layer0=list(first), runs_max=list(most),
                                 fused_layers=sum(step.fused)))
        return events

    def shrink_point(self) -> list:
        """A shrink point between steps (app/workloads/shrink_points.py): a ``Shrunk`` event when the pool gave
        memory back."""
        return run_shrink_point(self.pool)

    def check_integrity(self) -> None:
        self.pool.check_integrity()
        if self.prefix_cache is not None:
            self.prefix_cache.check_integrity()
        self.conversations.check_integrity()

    def live_sequences(self) -> list[int]:
        return list(self.pool.sequence_ids())

    def held_bytes(self) -> int:
        """K/V bytes the pool's storage holds now (its reserved capacity, every layer): what a prefill chunk's
        in-flight bound counts as held (app/workloads/inflight_bound.py)."""
        return self.pool.bytes_now().reserved

    def close(self) -> None:
        self.conversations.clear()
        if self.prefix_cache is not None:
            self.prefix_cache.clear()


class DenseBackend:
    """mlx-lm's own caches with the same schedule: per-layer ``KVCache`` lists during prefill (one row per sequence
    of a chunk the scheduler batches, as mlx-lm's BatchGenerator prefills its prompts together), a per-layer
    ``BatchKVCache`` for the decoding batch. Owns ``_prefill`` (each prefilling sequence's ``_Rows``) and
    ``_batch``/``_batch_ids``."""

    name = "dense"
    pool = None
    prefix_cache = None

    def __init__(self, num_layers: int):
        self.num_layers = num_layers
        self._prefill: dict[int, _Rows] = {}
        self._batch: list[BatchKVCache] | None = None
        self._batch_ids: list[int] = []
        self.conversations = DenseConversations()

    def admit(self, seq: Sequence) -> bool:
        kept = self.conversations.resume(seq)
        if kept is not None:
            # extended in place by this turn (mlx-lm prompt-cache style)
            self._prefill[seq.seq_id] = _Rows((seq.seq_id,), kept.state)
            seq.num_cached = seq.num_shared = len(kept.tokens)
        else:
            self._prefill[seq.seq_id] = _Rows((seq.seq_id,), [PrefillKVCache() for _ in range(self.num_layers)])
        return True

    def finish_decode(self) -> list:
        return []

    def finish_prefill(self) -> list:
        return []

    def shrink_point(self) -> list:
        return []  # mlx-lm's caches are freed with their sequences; there is no pool to shrink

    def release(self, seq: Sequence) -> None:
        """Drop a finished sequence (from the decoding batch: ``filter``); a conversation turn with a follow-up
        keeps its per-layer ``KVCache`` (``extract``) first."""
        self.conversations.finish(seq, lambda: self._extract(seq.seq_id))
        self._prefill.pop(seq.seq_id, None)
        if seq.seq_id in self._batch_ids:
            keep = [i for i, sid in enumerate(self._batch_ids) if sid != seq.seq_id]
            self._batch_ids = [self._batch_ids[i] for i in keep]
            if not keep:
                self._batch = None
            else:
                for cache in self._batch:
                    cache.filter(keep)

    def _extract(self, seq_id: int) -> list[KVCache]:
        if seq_id in self._prefill:
            return self._prefill[seq_id].alone(seq_id)
        index = self._batch_ids.index(seq_id)
        return [PrefillKVCache.adopt(cache.extract(index)) for cache in self._batch]

    def prefill_caches(self, seqs: tuple[Sequence, ...], start: int, num_tokens: int) -> list:
        """Per-layer caches of one prefill chunk, one row per sequence of ``seqs`` (all at ``start``). Sequences
        that prefilled the previous chunk together keep their caches; a new grouping copies their K/V into new
        ones (nothing to copy at a first chunk)."""
        ids = tuple(seq.seq_id for seq in seqs)
        rows = self._prefill[ids[0]]
        if rows.ids != ids:
            rows = self._regroup(ids, start)
        if rows.caches[0].offset != start:
            raise RuntimeError(f"dense prefill of sequences {list(ids)} at {start}, cache holds "
                               f"{rows.caches[0].offset}")
        return rows.caches

    def _regroup(self, ids: tuple[int, ...], start: int) -> "_Rows":
        """Caches holding ``ids``'s K/V (each at ``start``) in that row order; the sequences they leave behind in
        an earlier grouping get caches of their own (row views: copied when next written)."""
        if start == 0:
            caches = [PrefillKVCache() for _ in range(self.num_layers)]
        else:
            parts = [self._prefill[sid].alone(sid) for sid in ids]
            caches = [_joined([p[layer] for p in parts]) for layer in range(self.num_layers)]
        earlier = {id(self._prefill[sid]): self._prefill[sid] for sid in ids}.values()
        for old in earlier:
            for sid in old.ids:
                if sid not in ids and self._prefill.get(sid) is old:
                    self._prefill[sid] = _Rows((sid,), old.alone(sid))
        rows = _Rows(ids, caches)
        for sid in ids:
            self._prefill[sid] = rows
        return rows

    def decode_caches(self, seqs: tuple[Sequence, ...], starts: list[int] | None = None) -> list:
        """The batch's per-layer caches (joining newly prefilled sequences). ``starts`` is not needed:
        ``BatchKVCache`` keeps its own offsets, advanced by each step built on it."""
        ids = [s.seq_id for s in seqs]
        joining = [sid for sid in ids if sid not in self._batch_ids]
        if joining:
            self._join(joining)
        if self._batch_ids != ids:
            raise RuntimeError(f"dense batch order {self._batch_ids} differs from the plan {ids}")
        return self._batch

    def _join(self, seq_ids: list[int]) -> None:
        """Move prefilled sequences into the decoding batch (appended, as the scheduler orders them)."""
        own = [self._prefill[sid].alone(sid) for sid in seq_ids]
        per_layer = [BatchKVCache.merge([caches[layer] for caches in own]) for layer in range(self.num_layers)]
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
        for seq_id, rows in self._prefill.items():
            assert seq_id in rows.ids, f"sequence {seq_id} maps to prefill caches without its row"
            assert len({cache.offset for cache in rows.caches}) == 1, f"sequence {seq_id}: layers at other offsets"
        self.conversations.check_integrity()

    def live_sequences(self) -> list[int]:
        return sorted(set(self._prefill) | set(self._batch_ids))

    def held_bytes(self) -> int:
        """Bytes of the K/V arrays mlx-lm's caches hold now, kept conversation turns included (each array object
        once; a row view counts its own bytes beside the group it came from: more held, never less, so the
        in-flight bound never throttles dense below what it holds)."""
        caches = [c for rows in self._prefill.values() for c in rows.caches] + list(self._batch or [])
        caches += [c for state in self.conversations.kept_states() for c in state]
        arrays = {id(a): a.nbytes for cache in caches for a in (cache.keys, cache.values) if a is not None}
        return sum(arrays.values())

    def close(self) -> None:
        self.conversations.clear()
        self._prefill.clear()
        self._batch = None
        self._batch_ids = []


class _Rows:
    """Per-layer ``KVCache``s whose batch axis holds the K/V of ``ids``, one row each (a prefill group; a
    sequence alone is a group of one)."""

    def __init__(self, ids: tuple[int, ...], caches: list[KVCache]):
        self.ids = ids
        self.caches = caches

    def alone(self, seq_id: int) -> list[KVCache]:
        """``seq_id``'s K/V as caches of its own: these caches for a group of one, else views of its row."""
        if self.ids == (seq_id,):
            return self.caches
        row = self.ids.index(seq_id)
        out = []
        for cache in self.caches:
            own = PrefillKVCache()
            if cache.keys is not None:
                own.keys = cache.keys[row:row + 1, :, :cache.offset]
                own.values = cache.values[row:row + 1, :, :cache.offset]
                own.offset = cache.offset
            out.append(own)
        return out


def _joined(caches: list[KVCache]) -> KVCache:
    """One cache whose rows are ``caches``' K/V (all at the same offset), concatenated along the batch axis."""
    import mlx.core as mx

    joined = PrefillKVCache()
    joined.keys = mx.concatenate([c.keys[..., :c.offset, :] for c in caches])
    joined.values = mx.concatenate([c.values[..., :c.offset, :] for c in caches])
    joined.offset = caches[0].offset
    return joined
