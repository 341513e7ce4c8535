"""Hypothesis state machine: random new sequence / append / overwrite (into shared blocks) / release / clone /
detach / adopt / release_handle / trim / logical-start moves / shrink points, across slab boundaries, for both designs
and a compacting slab pool. After every
step the pool's integrity holds and every sequence's gather equals a dense reference built from the same writes."""

from __future__ import annotations

import mlx.core as mx
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pool import PagedKVPool, PoolConfig, ShrinkPolicy
from pool_writes import write_kv

LAYERS, BLOCK, SLAB, HEADS, DIM = 2, 2, 2, 1, 2  # slabs of 4 tokens: most spans cross slab boundaries
MAX_SEQS = 5
pick = st.integers(0, 1_000)


class PoolMachine(RuleBasedStateMachine):
    design = "slab"
    shrink = ShrinkPolicy()  # off: the shrink rule only logs its point
    open_blocks = "low"

    def __init__(self):
        super().__init__()
        self.pool = PagedKVPool(PoolConfig(num_layers=LAYERS, block_size=BLOCK, slab_blocks=SLAB,
                                           design=self.design, shrink=self.shrink,
                                           open_blocks=self.open_blocks))
        self.refs: dict[int, list[tuple[mx.array, mx.array]]] = {}  # seq -> per layer (K, V) [length, H, D]
        self.starts: dict[int, int] = {}
        self.handles: list[tuple] = []  # (handle, refs, logical_start)
        self.next_seq = 0
        self.stamp = 0

    def _chunk(self, num_tokens: int, layer: int):
        self.stamp += 1
        base = mx.arange(num_tokens * HEADS * DIM, dtype=mx.float32).reshape(num_tokens, HEADS, DIM)
        return base + 1000.0 * self.stamp + 0.5 * layer, -(base + 1000.0 * self.stamp) - 0.25 * layer

    def _write(self, seq: int, start: int, num_tokens: int) -> None:
        self.pool.prepare_write(seq, start, num_tokens)
        for layer in range(LAYERS):
            keys, values = self._chunk(num_tokens, layer)
            write_kv(self.pool, layer, seq, start, keys, values)
            ref_k, ref_v = self.refs[seq][layer]
            end = start + num_tokens
            self.refs[seq][layer] = (mx.concatenate([ref_k[:start], keys, ref_k[end:]]),
                                     mx.concatenate([ref_v[:start], values, ref_v[end:]]))

    def _seq(self, index: int) -> int:
        ids = sorted(self.refs)
        return ids[index % len(ids)]

    def _length(self, seq: int) -> int:
        return self.refs[seq][0][0].shape[0]

    @precondition(lambda self: len(self.refs) < MAX_SEQS)
    @rule(tokens=st.integers(0, 9))
    def new_sequence(self, tokens):
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        self.pool.add_sequence(seq)
        empty = mx.zeros((0, HEADS, DIM))
        self.refs[seq] = [(empty, empty) for _ in range(LAYERS)]
        self.starts[seq] = 0
        if tokens:
            self._write(seq, 0, tokens)

    @precondition(lambda self: self.refs)
    @rule(which=pick, tokens=st.integers(1, 7))
    def append(self, which, tokens):
        seq = self._seq(which)
        self._write(seq, self._length(seq), tokens)

    @precondition(lambda self: any(self._length(s) for s in self.refs))
    @rule(which=pick, back=st.integers(1, 6), tokens=st.integers(1, 5))
    def overwrite(self, which, back, tokens):
        seq = self._seq(which)
        self._write(seq, max(0, self._length(seq) - back), tokens)

    @precondition(lambda self: self.refs)
    @rule(which=pick)
    def release(self, which):
        seq = self._seq(which)
        self.pool.release(seq)
        del self.refs[seq], self.starts[seq]

    @precondition(lambda self: self.refs and len(self.refs) < MAX_SEQS)
    @rule(which=pick, fraction=st.floats(0, 1))
    def clone(self, which, fraction):
        src = self._seq(which)
        tokens = int(self._length(src) * fraction)
        dst, self.next_seq = self.next_seq, self.next_seq + 1
        self.pool.clone(src, dst, tokens)
        self.refs[dst] = [(k[:tokens], v[:tokens]) for k, v in self.refs[src]]
        self.starts[dst] = min(self.starts[src], tokens)

    @precondition(lambda self: self.refs and len(self.handles) < 3)
    @rule(which=pick)
    def detach(self, which):
        seq = self._seq(which)
        handle = self.pool.detach(seq)
        assert handle.num_tokens == self._length(seq)
        self.handles.append((handle, self.refs.pop(seq), self.starts.pop(seq)))

    @precondition(lambda self: self.handles and len(self.refs) < MAX_SEQS)
    @rule(which=pick)
    def adopt(self, which):
        handle, refs, start = self.handles[which % len(self.handles)]
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        self.pool.adopt(handle, seq)
        self.refs[seq], self.starts[seq] = list(refs), start

    @precondition(lambda self: self.handles)
    @rule(which=pick)
    def release_handle(self, which):
        handle, _, _ = self.handles.pop(which % len(self.handles))
        self.pool.release_handle(handle)

    @precondition(lambda self: self.refs)
    @rule(which=pick, blocks=st.integers(0, 5))
    def trim(self, which, blocks):
        seq = self._seq(which)
        tokens = blocks * BLOCK
        if tokens > self._length(seq) or tokens < self.starts[seq]:
            return
        self.pool.trim(seq, tokens)
        self.refs[seq] = [(k[:tokens], v[:tokens]) for k, v in self.refs[seq]]

    @precondition(lambda self: self.refs)
    @rule(which=pick, start=st.integers(0, 6))
    def move_logical_start(self, which, start):
        seq = self._seq(which)
        start = min(start, self._length(seq))
        self.pool.set_logical_start(seq, start)
        self.starts[seq] = start

    @rule(which=pick, tokens=st.integers(1, 12))
    def reserve(self, which, tokens):
        if self.refs:
            seq = self._seq(which)
            self.pool.reserve({seq: self._length(seq) + tokens})

    @rule()
    def shrink_point(self):
        self.pool.shrink()  # moves and releases must keep every invariant and gather below

    @invariant()
    def snapshot_matches_from_scratch(self):
        from pool.snapshot import _row_owners

        cached = self.pool.snapshot()
        self.pool.snapshot_cache.clear()
        fresh = self.pool.snapshot()
        assert cached == fresh
        assert fresh.row_owner == _row_owners(self.pool.book)
        for entry in fresh.layers:  # every layer holds the one row space
            assert sum(1 for owner in fresh.row_owner if owner == -1) == entry.free_rows
            assert entry.capacity_rows == len(fresh.row_owner) == len(fresh.row_refcount)

    @invariant()
    def integrity_and_dense_parity(self):
        self.pool.check_integrity()
        seqs = sorted(self.refs)
        view = self.pool.step_view(seqs)
        assert view.lengths == tuple(self.refs[seq][0][0].shape[0] for seq in seqs)
        assert view.rows == tuple(tuple(self.pool.book.table(seq).rows) for seq in seqs)
        for seq, per_layer in self.refs.items():
            if not self.pool.storage.initialised:
                continue
            start = self.starts[seq]
            for layer, (ref_k, ref_v) in enumerate(per_layer):
                got = self.pool.gather_visible(layer, seq)
                assert mx.array_equal(got.keys, ref_k[start:].transpose(1, 0, 2))
                assert mx.array_equal(got.values, ref_v[start:].transpose(1, 0, 2))

    def teardown(self):
        """Release everything: no leak on any path (live blocks back to zero, integrity holds)."""
        for seq in list(self.refs):
            self.pool.release(seq)
        for handle, _, _ in self.handles:
            self.pool.release_handle(handle)
        stats = self.pool.stats()
        assert stats.live_blocks == 0 and stats.free_blocks == stats.allocated_blocks
        self.pool.check_integrity()


class MonolithicMachine(PoolMachine):
    design = "monolithic"


class CompactingMachine(PoolMachine):
    shrink = ShrinkPolicy("compact", 1 << 30, 1.0)  # every block of a slab may move, no budget limit


class OpenBlocksHighMachine(PoolMachine):
    open_blocks = "high"  # open blocks on the highest rows (a reserve rule gives them a top to take)


SETTINGS = settings(max_examples=60, stateful_step_count=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
TestSlabPoolMachine = PoolMachine.TestCase
TestSlabPoolMachine.settings = SETTINGS
TestMonolithicPoolMachine = MonolithicMachine.TestCase
TestMonolithicPoolMachine.settings = SETTINGS
TestCompactingPoolMachine = CompactingMachine.TestCase
TestCompactingPoolMachine.settings = SETTINGS
TestOpenBlocksHighPoolMachine = OpenBlocksHighMachine.TestCase
TestOpenBlocksHighPoolMachine.settings = SETTINGS
