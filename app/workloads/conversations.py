"""Conversation state kept between turns (``multiturn``): the finished turn's K/V, partial last block included.

A conversation turn's request carries ``kv_key`` (the conversation) and ``keep_kv`` (a later turn follows). When
such a turn finishes, its K/V is kept instead of freed; the next turn of the same conversation resumes from it
and prefills only the new user message. The kept state is the conversation's *checkpoint*: it stays held while
the next turn runs (so that turn could be retried or regenerated from it) and is dropped when that turn ends.

- Paged (``PagedConversations``): the finished sequence is detached into a ``PrefixHandle`` that pins all its
  blocks, the partial last one too; the next turn adopts the handle, so its first write lands in a block shared
  with the checkpoint and the pool copy-on-writes it (``cow_copies``, ``cow`` op). Plain Python, no mlx.
- Dense (``DenseConversations``): the sequence's per-layer ``KVCache`` extracted from the decoding
  ``BatchKVCache`` (mlx-lm's own prompt-cache reuse); the next turn's prefill extends it.
Both resume at the same position, so the three backends run the same schedule.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _KeptTurn:
    state: object          # PrefixHandle (paged) or list of per-layer KVCache (dense)
    tokens: tuple          # the tokens whose K/V the state holds
    resumed_by: int | None = None  # seq id of the turn running on it (the state stays held until it ends)


class _Conversations:
    """Owns the kept states by conversation key; subclasses say how a state is made, adopted and dropped."""

    def __init__(self):
        self._kept: dict[str, _KeptTurn] = {}
        self.resumed_turns = self.resumed_tokens = 0

    def _resumable(self, seq) -> _KeptTurn | None:
        """The kept state ``seq`` can continue: its conversation's, unused, whose tokens prefix the prompt and
        are at most ``prefill_end`` (the last prompt token is decode input). Changes nothing."""
        key = seq.request.kv_key
        kept = self._kept.get(key) if key is not None else None
        if kept is None or kept.resumed_by is not None:
            return None
        n = len(kept.tokens)
        if n == 0 or n > seq.prefill_end or tuple(seq.tokens[:n]) != kept.tokens:
            return None
        return kept

    def resumable_tokens(self, seq) -> int:
        kept = self._resumable(seq)
        return 0 if kept is None else len(kept.tokens)

    def resume(self, seq) -> _KeptTurn | None:
        """Mark the state ``seq`` continues (see ``_resumable``) in use and return it; None if there is none."""
        kept = self._resumable(seq)
        if kept is None:
            return None
        n = len(kept.tokens)
        kept.resumed_by = seq.seq_id
        self.resumed_turns += 1
        self.resumed_tokens += n
        return kept

    def finish(self, seq, make_state) -> bool:
        """``seq`` ended: drop the checkpoint it resumed from; keep its own state when a turn follows (via
        ``make_state()``, which takes the sequence's K/V out of the backend). True if the state was kept."""
        key = seq.request.kv_key
        if key is None:
            return False
        old = self._kept.pop(key, None)
        if old is not None:
            self._drop(old)
        if not seq.request.keep_kv:
            return False
        self._kept[key] = _KeptTurn(make_state(), tuple(seq.tokens[:seq.num_cached]))
        return True

    def clear(self) -> None:
        for kept in self._kept.values():
            self._drop(kept)
        self._kept.clear()

    def counters(self) -> dict[str, int]:
        return {"resumed_turns": self.resumed_turns, "resumed_tokens": self.resumed_tokens,
                "kept": len(self._kept)}

    def _drop(self, kept: _KeptTurn) -> None:
        raise NotImplementedError


class PagedConversations(_Conversations):
    """Kept turns as pool ``PrefixHandle``s (blocks pinned by refcount, partial last block included)."""

    def __init__(self, pool):
        super().__init__()
        self.pool = pool

    def adopt(self, seq) -> int:
        """Create ``seq`` in the pool from its conversation's kept handle; returns the tokens it starts with
        (0: no kept state, nothing created)."""
        kept = self.resume(seq)
        if kept is None:
            return 0
        self.pool.adopt(kept.state, seq.seq_id)
        return len(kept.tokens)

    def keep_or_release(self, seq) -> None:
        """Detach (keep) or release ``seq``'s blocks in the pool, dropping the checkpoint it resumed from."""
        if not self.finish(seq, lambda: self.pool.detach(seq.seq_id)):
            self.pool.release(seq.seq_id)

    def _drop(self, kept: _KeptTurn) -> None:
        self.pool.release_handle(kept.state)

    def check_integrity(self) -> None:
        for key, kept in self._kept.items():
            assert kept.state.num_tokens == len(kept.tokens), f"conversation {key}: handle length != tokens"


class DenseConversations(_Conversations):
    """Kept turns as per-layer ``KVCache`` lists (mlx-lm's prompt cache)."""

    def _drop(self, kept: _KeptTurn) -> None:
        kept.state = None  # the arrays go with the last reference

    def kept_states(self) -> list:
        """The per-layer cache lists of the turns kept now (none dropped)."""
        return [kept.state for kept in self._kept.values() if kept.state is not None]

    def check_integrity(self) -> None:
        for key, kept in self._kept.items():
            if kept.resumed_by is None:
                offsets = {cache.offset for cache in kept.state}
                assert offsets == {len(kept.tokens)}, f"conversation {key}: cache offsets {offsets}"
