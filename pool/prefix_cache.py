"""Cross-request prefix sharing on a ``PagedKVPool`` (plain Python, no mlx).

A finished (or growing) sequence's *full* token blocks are kept by refcount: the cache clones the sequence's
first ``k`` full blocks into a keeper sequence and detaches it, so the pool pins those blocks in a
``PrefixHandle`` and the keeper never appears as a live sequence. Each kept block is indexed by a chained hash
(hash of the parent block's hash and this block's tokens, as in nano-vllm's block manager); a lookup walks a new
prompt's blocks, confirms every hit against the stored tokens and the parent hash (a hash collision can never
hand out wrong K/V), and the new sequence adopts the handle of the deepest hit, trimmed to the matched length.
Writes after the shared prefix go to fresh blocks; the pool copy-on-writes any shared block a sequence writes
into, so sharing is invisible to the arithmetic.

Counters: ``cached_tokens`` (prompt tokens served from the cache), ``shared_blocks`` (blocks handed out by
reference), ``lookups``/``hits``, ``inserted_blocks``, ``evicted_handles``. ``check_integrity()`` validates the
index against the handles.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

# Keeper sequence ids live far above any workload's ids so they can never collide.
_KEEPER_ID_BASE = 1 << 48


@dataclass(frozen=True)
class _BlockEntry:
    """One indexed block: where it is kept and what it must contain."""

    keeper_id: int
    depth: int  # 1-based block index within the keeper's handle
    parent_hash: int | None
    tokens: tuple[int, ...]


@dataclass
class _KeptPrefix:
    handle: object
    num_blocks: int
    hashes: list[int] = field(default_factory=list)


def chain_hashes(tokens: list[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of ``tokens`` (block j's hash covers blocks 0..j)."""
    hashes: list[int] = []
    parent: int | None = None
    for j in range(len(tokens) // block_size):
        block = tuple(tokens[j * block_size:(j + 1) * block_size])
        parent = hash((parent, block))
        hashes.append(parent)
    return hashes


class PrefixCache:
    """Owns the hash index and the pinned handles; mutates the pool only through add/adopt/trim/clone/detach.

    ``max_cached_blocks`` bounds the blocks pinned by the cache (least recently used handles go first);
    ``None`` means unbounded (handles still go when ``evict`` is called under pool pressure).
    """

    def __init__(self, pool, block_size: int, max_cached_blocks: int | None = None):
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.pool = pool
        self.block_size = block_size
        self.max_cached_blocks = max_cached_blocks
        self._index: dict[int, _BlockEntry] = {}
        self._kept: OrderedDict[int, _KeptPrefix] = OrderedDict()  # LRU order: oldest first
        self._next_keeper = _KEEPER_ID_BASE
        self.lookups = self.hits = self.cached_tokens = self.shared_blocks = 0
        self.inserted_blocks = self.evicted_handles = 0

    # ----------------------------------------------------------------- lookup / attach
    def match(self, tokens: list[int]) -> tuple[int, int | None]:
        """(number of leading full blocks of ``tokens`` held in the cache, keeper id holding them)."""
        parent: int | None = None
        best: tuple[int, int | None] = (0, None)
        for j in range(len(tokens) // self.block_size):
            block = tuple(tokens[j * self.block_size:(j + 1) * self.block_size])
            h = hash((parent, block))
            entry = self._index.get(h)
            if entry is None or entry.tokens != block or entry.parent_hash != parent or entry.depth != j + 1:
                break
            best = (j + 1, entry.keeper_id)
            parent = h
        return best

    def attach(self, seq_id: int, tokens: list[int], max_tokens: int, align_tokens: int = 1) -> int:
        """Create sequence ``seq_id`` in the pool, starting from the longest cached prefix of
        ``tokens[:max_tokens]`` whose length is a multiple of ``align_tokens``; returns the number of tokens it
        starts with (0: a plain new sequence).

        ``align_tokens``: the workloads pass lcm(block_size, prefill_chunk), so a sequence resumes exactly at a
        prefill-chunk boundary and computes the same chunks (same matmul shapes, same bytes) as a cold run would.
        """
        self.lookups += 1
        num_blocks, keeper_id = self.match(tokens[:max(0, max_tokens)])
        step = max(1, align_tokens)
        num_blocks = (num_blocks * self.block_size // step * step) // self.block_size
        if keeper_id is None or num_blocks == 0:
            self.pool.add_sequence(seq_id)
            return 0
        kept = self._kept[keeper_id]
        self.pool.adopt(kept.handle, seq_id)
        if num_blocks < kept.num_blocks:
            self.pool.trim(seq_id, num_blocks * self.block_size)
        self._kept.move_to_end(keeper_id)
        self.hits += 1
        self.cached_tokens += num_blocks * self.block_size
        self.shared_blocks += num_blocks
        return num_blocks * self.block_size

    # ----------------------------------------------------------------- insert / evict
    def insert(self, seq_id: int, tokens: list[int]) -> int:
        """Keep the full blocks of live sequence ``seq_id`` whose cache holds ``tokens``; returns blocks kept.

        Handles made redundant (every block they index now indexed by the new, longer handle) are released.
        """
        hashes = chain_hashes(tokens, self.block_size)
        if not hashes:
            return 0
        matched, _ = self.match(tokens)
        if matched == len(hashes):
            return 0  # already fully cached
        keeper_id = self._next_keeper
        self._next_keeper += 1
        self.pool.clone(seq_id, keeper_id, len(hashes) * self.block_size)
        handle = self.pool.detach(keeper_id)
        self._kept[keeper_id] = _KeptPrefix(handle, len(hashes), hashes)
        parent: int | None = None
        for j, h in enumerate(hashes):
            block = tuple(tokens[j * self.block_size:(j + 1) * self.block_size])
            self._index[h] = _BlockEntry(keeper_id, j + 1, parent, block)
            parent = h
        self.inserted_blocks += len(hashes) - matched
        self._drop_redundant()
        self._enforce_limit()
        return len(hashes)

    def evict(self, num_handles: int = 1) -> int:
        """Release up to ``num_handles`` least recently used handles; returns how many were released."""
        released = 0
        while self._kept and released < num_handles:
            self._release(next(iter(self._kept)))
            released += 1
        return released

    def clear(self) -> None:
        """Release every handle (the pool frees blocks no live sequence shares)."""
        self.evict(len(self._kept))

    def _release(self, keeper_id: int) -> None:
        kept = self._kept.pop(keeper_id)
        for h in kept.hashes:
            if self._index.get(h) is not None and self._index[h].keeper_id == keeper_id:
                del self._index[h]
        self.pool.release_handle(kept.handle)
        self.evicted_handles += 1

    def _drop_redundant(self) -> None:
        for keeper_id in [k for k, kept in self._kept.items()
                          if not any(self._index.get(h) and self._index[h].keeper_id == k for h in kept.hashes)]:
            kept = self._kept.pop(keeper_id)
            self.pool.release_handle(kept.handle)

    def _enforce_limit(self) -> None:
        if self.max_cached_blocks is None:
            return
        while len(self._kept) > 1 and self.num_cached_blocks > self.max_cached_blocks:
            self.evict(1)

    # ----------------------------------------------------------------- introspection
    @property
    def num_cached_blocks(self) -> int:
        return len(self._index)

    @property
    def num_handles(self) -> int:
        return len(self._kept)

    def counters(self) -> dict[str, int]:
        return {"lookups": self.lookups, "hits": self.hits, "cached_tokens": self.cached_tokens,
                "shared_blocks": self.shared_blocks, "inserted_blocks": self.inserted_blocks,
                "evicted_handles": self.evicted_handles, "cached_blocks": self.num_cached_blocks,
                "handles": self.num_handles}

    def check_integrity(self) -> None:
        """Raise AssertionError naming the broken invariant of the index/handle bookkeeping."""
        for h, entry in self._index.items():
            assert entry.keeper_id in self._kept, f"index entry {h} points to a released handle"
            kept = self._kept[entry.keeper_id]
            assert 1 <= entry.depth <= kept.num_blocks, f"index entry {h} deeper than its handle"
            assert kept.hashes[entry.depth - 1] == h, f"index entry {h} not at its depth in the handle"
            assert len(entry.tokens) == self.block_size, f"index entry {h} is not a full block"
        for keeper_id, kept in self._kept.items():
            assert len(kept.hashes) == kept.num_blocks, f"handle {keeper_id}: hash count != block count"
            assert any(self._index.get(h) and self._index[h].keeper_id == keeper_id for h in kept.hashes), \
                f"handle {keeper_id} indexes nothing (should have been released)"
