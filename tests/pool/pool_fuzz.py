"""Pool facade fuzz: seeded random valid and invalid calls, mixed.

Every invalid call must raise PoolError and leave the pool exactly as it was (``full_state`` before == after, and
every sequence still gathers its reference bytes, so a partial store cannot hide). Every valid call must keep
each sequence's gather byte-identical to a dense reference (numpy arrays of everything written) and the pool's
integrity. Shrink points (``shrink``, a valid call) run the seed's shrink policy (off, release or compact, with a
budget from nothing to everything): moves and releases must leave every gather and the integrity intact. Valid
calls that a limit refuses (budget, device room) count as clear errors and must change nothing too. Run from
tests/pool/test_pool_fuzz.py (CI size) and ``make fuzz`` (SLABSCOPE_FUZZ_SCALE times larger).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import mlx.core as mx
import numpy as np

from pool import BudgetExceeded, PagedKVPool, PoolConfig, PoolError, PrefixHandle, ShrinkPolicy
from pool.errors import SizeLimitError
from pool.limits import MemoryLimits

from pool_helpers import full_state
from pool_writes import write_batch_kv, write_kv, write_tokens_kv

LAYERS, BLOCK, SLAB, HEADS, DIM = 2, 2, 2, 2, 3
MAX_SEQS, MAX_HANDLES = 6, 3
ROW_BYTES = 2 * BLOCK * HEADS * DIM * 4  # K + V, float32


SHRINK_BUDGETS = (0, LAYERS * ROW_BYTES, 3 * LAYERS * ROW_BYTES, 1 << 30)  # nothing, one block, three, everything


def shrink_policy(seed: int) -> ShrinkPolicy:
    """The seed's shrink policy: off, release or compact; compaction with one of SHRINK_BUDGETS and a fill limit."""
    mode = ("off", "release", "compact", "compact")[seed % 4]
    return ShrinkPolicy(mode, SHRINK_BUDGETS[(3 * seed + seed // 4) % 4], 1.0 if seed // 4 % 2 else 0.5)


def _pool(design: str, guard: str, shrink: ShrinkPolicy | None = None, open_blocks: str = "low") -> PagedKVPool:
    """``guard``: "budget" (16 live blocks per layer) or "memory" (room for 6 slabs, or 1.5 monolithic grow chunks,
    per layer; the budget of 64 blocks only stops what no memory check can see before the first write fixes the
    row geometry)."""
    config = PoolConfig(num_layers=LAYERS, block_size=BLOCK, slab_blocks=SLAB, design=design,
                        max_blocks_per_layer=16 if guard == "budget" else 64, shrink=shrink or ShrinkPolicy(),
                        open_blocks=open_blocks)
    room_rows = 6 * SLAB if design == "slab" else 48
    limits = MemoryLimits(memory_bytes=room_rows * LAYERS * ROW_BYTES if guard == "memory" else 2**40,
                          max_buffer_bytes=2**40, source="fuzz limits")
    return PagedKVPool(config, limits=limits)


class PoolFuzz:
    """Drives one pool; owns the dense reference and the outcome counts (``counts``)."""

    def __init__(self, seed: int, design: str, open_blocks: str = "low"):
        self.rng = random.Random(seed)
        self.pool = _pool(design, "budget" if seed % 2 else "memory", shrink_policy(seed), open_blocks)
        other = _pool(design, "budget")
        other.add_sequence(0)
        self.foreign = [other.detach(0)]  # handle id 0 of another pool: collides with this pool's first handle
        self.refs: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.starts: dict[int, int] = {}
        self.handles: list[tuple[PrefixHandle, list, int]] = []
        self.released: list[PrefixHandle] = []
        self.next_seq = 0
        self.stamp = 0
        self.counts: Counter = Counter()
        self.old_slots = None  # the last decode step's slots: stale once any row changed
        if seed % 2 == 0:  # fix the geometry first, so every growth is checked against the memory limit
            self.new_sequence()
            self.write_span()

    # ---- helpers ---------------------------------------------------------------------------------------------
    def _kv(self, tokens: int, heads: int = HEADS, dim: int = DIM) -> tuple[np.ndarray, np.ndarray]:
        self.stamp += 1
        base = np.arange(tokens * heads * dim, dtype=np.float32).reshape(tokens, heads, dim)
        return base + 1000.0 * self.stamp, -(base + 1000.0 * self.stamp) - 0.5

    def _seq(self) -> int | None:
        return self.rng.choice(sorted(self.refs)) if self.refs else None

    def _length(self, seq: int) -> int:
        return self.refs[seq][0][0].shape[0]

    def _new_id(self) -> int:
        self.next_seq += 1
        return self.next_seq - 1

    def _store(self, seq: int, layer: int, start: int, keys: np.ndarray, values: np.ndarray) -> None:
        ref_k, ref_v = self.refs[seq][layer]
        end = start + keys.shape[0]
        self.refs[seq][layer] = (np.concatenate([ref_k[:start], keys, ref_k[end:]]),
                                 np.concatenate([ref_v[:start], values, ref_v[end:]]))

    def _has_storage(self) -> bool:
        return self.pool.storage.initialised

    # ---- checks ----------------------------------------------------------------------------------------------
    def check_reference(self) -> None:
        """Integrity, and every sequence's visible K/V byte-identical to the dense reference."""
        pool = self.pool
        pool.check_integrity()
        assert pool.stats().bytes_reserved <= pool.limits.memory_bytes
        assert sorted(pool.sequence_ids()) == sorted(self.refs)
        self.check_step_view()
        for seq, per_layer in self.refs.items():
            if not self._has_storage() or not self._length(seq):
                continue
            start = self.starts[seq]
            for layer, (ref_k, ref_v) in enumerate(per_layer):
                got = pool.gather_visible(layer, seq)
                assert np.array_equal(np.array(got.keys), ref_k[start:].transpose(1, 0, 2)), (seq, layer)
                assert np.array_equal(np.array(got.values), ref_v[start:].transpose(1, 0, 2)), (seq, layer)

    def check_step_view(self) -> None:
        """The step view every layer's launch reads agrees with the reference (lengths, logical starts), the book's
        one table per sequence (rows) and the storage every layer holds (slab count and size)."""
        pool, seqs = self.pool, sorted(self.refs)
        view = pool.step_view(seqs)
        assert view.lengths == tuple(self._length(seq) for seq in seqs)
        assert view.logical_starts == tuple(self.starts[seq] for seq in seqs)
        assert view.rows == tuple(tuple(pool.book.table(seq).rows) for seq in seqs)
        assert view.version == pool.book.version
        for layer in range(LAYERS):
            keys, values = pool.slabs(layer)
            assert len(keys) == len(values) == view.num_slabs
            assert all(int(t.shape[0]) == view.rows_per_slab for t in (*keys, *values))

    def _refused(self, call, kind: str, exc_type=PoolError) -> None:
        before = full_state(self.pool)
        try:
            call()
        except exc_type:
            pass
        else:
            raise AssertionError(f"invalid call {kind!r} was accepted")
        assert full_state(self.pool) == before, kind
        self.counts["clear error"] += 1
        self.counts[f"invalid:{kind}"] += 1

    # ---- one step --------------------------------------------------------------------------------------------
    def step(self) -> None:
        if self.rng.random() < 0.45:
            kind, call = self.rng.choice(self._invalid_calls())
            self._refused(call, kind)
        else:
            name = self.rng.choice(VALID_OPS)
            before = full_state(self.pool)
            try:
                getattr(self, name)()
                self.counts["identical"] += 1
                self.counts[f"valid:{name}"] += 1
            except (BudgetExceeded, SizeLimitError) as exc:
                assert full_state(self.pool) == before, (name, exc)
                self.counts["clear error"] += 1
                self.counts[f"limit:{type(exc).__name__}"] += 1
        self.check_reference()

    # ---- valid operations (each updates the reference exactly as the pool should change) ---------------------
    def new_sequence(self) -> None:
        if len(self.refs) >= MAX_SEQS:
            return
        seq = self._new_id()
        self.pool.add_sequence(seq)
        empty = np.zeros((0, HEADS, DIM), np.float32)
        self.refs[seq], self.starts[seq] = [(empty, empty)] * LAYERS, 0

    def write_span(self) -> None:
        seq = self._seq()
        if seq is None:
            return
        length = self._length(seq)
        start = self.rng.randint(max(0, length - 5), length)
        tokens = self.rng.randint(1, 7)
        self.pool.prepare_write(seq, start, tokens)
        self._extend(seq, start + tokens)
        for layer in range(LAYERS):
            keys, values = self._kv(tokens)
            write_kv(self.pool, layer, seq, start, mx.array(keys), mx.array(values))
            self._store(seq, layer, start, keys, values)

    def _extend(self, seq: int, end: int) -> None:
        """A prepared span past the length holds unspecified bytes until written: the reference pads with the
        values about to be written, so pad with zeros of the right length here."""
        grow = end - self._length(seq)
        if grow > 0:
            pad = np.zeros((grow, HEADS, DIM), np.float32)
            self.refs[seq] = [(np.concatenate([k, pad]), np.concatenate([v, pad])) for k, v in self.refs[seq]]

    def _prepare_each(self, tokens: int) -> tuple[list[int], list[int]]:
        """Prepare ``tokens`` at the end of 1-3 random sequences; returns (sequences, starts) prepared. A limit
        refusing a later one (which changed nothing) leaves the earlier ones to be written; refusing the first
        propagates."""
        seqs = self.rng.sample(sorted(self.refs), min(len(self.refs), self.rng.randint(1, 3)))
        prepared: list[int] = []
        for seq in seqs:
            try:
                self.pool.prepare_write(seq, self._length(seq), tokens)
            except (BudgetExceeded, SizeLimitError):
                if not prepared:
                    raise
                break
            prepared.append(seq)
        starts = [self._length(seq) for seq in prepared]
        for seq, start in zip(prepared, starts):
            self._extend(seq, start + tokens)
        return prepared, starts

    def write_batch(self) -> None:
        if not self.refs:
            return
        tokens = self.rng.randint(1, 4)
        seqs, starts = self._prepare_each(tokens)
        for layer in range(LAYERS):
            pairs = [self._kv(tokens) for _ in seqs]
            keys, values = np.stack([k for k, _ in pairs]), np.stack([v for _, v in pairs])
            write_batch_kv(self.pool, layer, seqs, starts, mx.array(keys), mx.array(values))
            for i, (seq, start) in enumerate(zip(seqs, starts)):
                self._store(seq, layer, start, keys[i], values[i])

    def decode_tokens(self) -> None:
        if not self.refs:
            return
        seqs, positions = self._prepare_each(1)
        slots = self.old_slots = self.pool.write_slots(seqs, positions, 1)
        for layer in range(LAYERS):
            keys, values = self._kv(len(seqs))
            write_tokens_kv(self.pool, layer, slots, mx.array(keys), mx.array(values))
            for i, (seq, position) in enumerate(zip(seqs, positions)):
                self._store(seq, layer, position, keys[i:i + 1], values[i:i + 1])

    def reserve(self) -> None:
        """Hold capacity for 1-3 sequences' growth by up to 12 tokens (what the engine does at admission): under
        ``open_blocks="high"`` the open blocks then take the top of that capacity."""
        if not self.refs:
            return
        seqs = self.rng.sample(sorted(self.refs), min(len(self.refs), self.rng.randint(1, 3)))
        self.pool.reserve({seq: self._length(seq) + self.rng.randint(1, 12) for seq in seqs})

    def release(self) -> None:
        seq = self._seq()
        if seq is not None:
            self.pool.release(seq)
            del self.refs[seq], self.starts[seq]

    def clone(self) -> None:
        src = self._seq()
        if src is None or len(self.refs) >= MAX_SEQS:
            return
        tokens = self.rng.randint(0, self._length(src))
        dst = self._new_id()
        self.pool.clone(src, dst, tokens)
        self.refs[dst] = [(k[:tokens], v[:tokens]) for k, v in self.refs[src]]
        self.starts[dst] = min(self.starts[src], tokens)

    def detach(self) -> None:
        seq = self._seq()
        if seq is None or len(self.handles) >= MAX_HANDLES:
            return
        handle = self.pool.detach(seq)
        self.handles.append((handle, self.refs.pop(seq), self.starts.pop(seq)))

    def adopt(self) -> None:
        if not self.handles or len(self.refs) >= MAX_SEQS:
            return
        handle, refs, start = self.rng.choice(self.handles)
        seq = self._new_id()
        self.pool.adopt(handle, seq)
        self.refs[seq], self.starts[seq] = list(refs), start

    def release_handle(self) -> None:
        if self.handles:
            handle, _, _ = self.handles.pop(self.rng.randrange(len(self.handles)))
            self.pool.release_handle(handle)
            self.released.append(handle)

    def trim(self) -> None:
        seq = self._seq()
        if seq is None:
            return
        length, start = self._length(seq), self.starts[seq]
        options = [t for t in range(start, length + 1) if t % BLOCK == 0 or t == length]
        if options:
            tokens = self.rng.choice(options)
            self.pool.trim(seq, tokens)
            self.refs[seq] = [(k[:tokens], v[:tokens]) for k, v in self.refs[seq]]

    def logical_start(self) -> None:
        seq = self._seq()
        if seq is not None:
            start = self.rng.randint(0, self._length(seq))
            self.pool.set_logical_start(seq, start)
            self.starts[seq] = start

    # ---- invalid calls (each must raise PoolError and change nothing) ----------------------------------------
    def _invalid_calls(self) -> list[tuple[str, object]]:
        pool, rng = self.pool, self.rng
        seq = self._seq()
        missing = 10_000 + rng.randrange(1000)
        keys, values = (mx.array(a) for a in self._kv(2))
        calls = [
            ("add_sequence bad id", lambda: pool.add_sequence(rng.choice([-1, True, 1.5, "3", None]))),
            ("prepare_write unknown", lambda: pool.prepare_write(missing, 0, 1)),
            ("write unknown", lambda: write_kv(pool, 0, missing, 0, keys, values)),
            ("write layer out of range",
             lambda: write_kv(pool, rng.choice([-1, LAYERS, True]), missing, 0, keys, values)),
            ("write numpy", lambda: write_kv(pool, 0, missing, 0, np.zeros((2, HEADS, DIM)), values)),
            ("write int32", lambda: write_kv(pool, 0, missing, 0, keys.astype(mx.int32), values.astype(mx.int32))),
            ("write K/V shapes differ", lambda: write_kv(pool, 0, missing, 0, keys, values[:1])),
            ("write 4-D", lambda: write_kv(pool, 0, missing, 0, keys[None], values[None])),
            ("write_batch empty", lambda: write_batch_kv(pool, 0, [], [], keys[None][:0], values[None][:0])),
            ("release unknown", lambda: pool.release(missing)),
            ("detach unknown", lambda: pool.detach(missing)),
            ("clone unknown", lambda: pool.clone(missing, missing + 1, 0)),
            ("adopt raw id", lambda: pool.adopt(0, missing)),
            ("adopt foreign handle", lambda: pool.adopt(self.foreign[0], missing)),
            ("release foreign handle", lambda: pool.release_handle(self.foreign[0])),
            ("adopt unissued handle", lambda: pool.adopt(PrefixHandle(0, 0), missing)),
            ("gather unknown", lambda: pool.gather_visible(0, missing)),
            ("step_view unknown", lambda: pool.step_view([missing])),
            ("slabs layer out of range", lambda: pool.slabs(LAYERS)),
            ("write_slots unknown", lambda: pool.write_slots([missing], [0], 1)),
            ("write_slots no tokens", lambda: pool.write_slots([missing], [0], 0)),
            ("reserve unknown", lambda: pool.reserve({missing: 4})),
            ("prepare_write beyond any room", lambda: pool.prepare_write(seq if seq is not None else missing, 0,
                                                                        10_000)),
        ]
        if self.released:
            released = self.released[-1]
            calls += [("adopt released handle", lambda: pool.adopt(released, missing)),
                      ("release handle twice", lambda: pool.release_handle(released))]
        if self.handles:
            forged = replace(self.handles[0][0], handle_id=10**6)
            calls.append(("adopt forged id", lambda: pool.adopt(forged, missing)))
        if seq is not None:
            calls += self._invalid_on(seq, keys, values)
        return calls

    def _invalid_on(self, seq: int, keys, values) -> list[tuple[str, object]]:
        """Invalid calls naming a live sequence (the checks that need real tables behind them)."""
        pool, rng = self.pool, self.rng
        length, start = self._length(seq), self.starts[seq]
        batch_k, batch_v = mx.stack([keys, keys]), mx.stack([values, values])
        other = next((s for s in sorted(self.refs) if s != seq), None)
        calls = [
            ("write zero heads", lambda: write_kv(pool, 0, seq, 0, keys[:1, :0], values[:1, :0])),
            ("write zero head_dim", lambda: write_kv(pool, 0, seq, 0, keys[:1, :, :0], values[:1, :, :0])),
            ("add_sequence existing", lambda: pool.add_sequence(seq)),
            ("prepare_write past length", lambda: pool.prepare_write(seq, length + rng.randint(1, 4), 1)),
            ("prepare_write no tokens", lambda: pool.prepare_write(seq, 0, rng.choice([0, -1, 1.0]))),
            ("write unprepared", lambda: write_kv(pool, 0, seq, length, keys, values)),
            ("write_batch fewer values", lambda: write_batch_kv(pool, 0, [seq, seq], [0, 0], batch_k, values[None])),
            ("write_batch values shorter",
             lambda: write_batch_kv(pool, 0, [seq, seq], [0, 0], batch_k, batch_v[:, :1])),
            ("write_batch starts mismatch", lambda: write_batch_kv(pool, 0, [seq, seq], [0], batch_k, batch_v)),
            ("write_batch second unprepared",
             lambda: write_batch_kv(pool, 0, [seq, seq], [max(0, length - 2), length], batch_k, batch_v)),
            ("clone too long", lambda: pool.clone(seq, 10**6, length + 1)),
            ("clone onto existing", lambda: pool.clone(seq, seq, 0)),
            ("trim past length", lambda: pool.trim(seq, length + 1)),
            ("logical_start past length", lambda: pool.set_logical_start(seq, length + 1)),
            ("logical_start negative", lambda: pool.set_logical_start(seq, -1)),
            ("write_slots twice", lambda: pool.write_slots([seq, seq], [0, 0], 1)),
            ("write_slots unprepared", lambda: pool.write_slots([seq], [length], 1)),
            ("write_slots span unprepared", lambda: pool.write_slots([seq], [max(0, length - 1)], 2)),
            ("gather bad layer", lambda: pool.gather_visible(LAYERS, seq)),
        ]
        if start < length and any(t % BLOCK for t in range(start, length)):
            bad = next(t for t in range(start, length) if t % BLOCK)
            calls.append(("trim misaligned", lambda: pool.trim(seq, bad)))
        if start > 0:
            calls.append(("trim below logical start", lambda: pool.trim(seq, start - 1)))
        if other is not None:
            calls.append(("adopt onto existing", lambda: pool.adopt(self.handles[0][0], other)) if self.handles
                         else ("clone onto other", lambda: pool.clone(seq, other, 0)))
        if self._has_storage():
            calls += self._invalid_geometry(seq, length, keys, values)
        return calls

    def _invalid_geometry(self, seq: int, length: int, keys, values) -> list[tuple[str, object]]:
        """Wrong dtype/shape against the geometry the first write fixed for every layer; stale write slots; shared
        blocks written without copy-on-write."""
        pool = self.pool
        calls = []
        if length:
            try:
                slots = pool.write_slots([seq], [length - 1], 1)
            except PoolError:  # its last block is shared
                slots = None
            if slots is not None:
                one_k, one_v = keys[None, :1], values[None, :1]
                heads, dim = (tuple(mx.array(a)[None, :1] for a in self._kv(2, **kw)) for kw in ({"heads": 3},
                                                                                                  {"dim": 5}))
                calls += [
                    ("write float16", lambda: pool.write(0, slots, one_k.astype(mx.float16), one_v.astype(mx.float16))),
                    ("write other heads", lambda: pool.write(0, slots, *heads)),
                    ("write other head_dim", lambda: pool.write(1, slots, *dim)),
                    ("write batch size", lambda: write_tokens_kv(pool, 0, slots, keys, values)),
                    ("write token count", lambda: pool.write(0, slots, keys[None], values[None])),
                ]
        old = self.old_slots
        if old is not None and old.version != pool.book.version:
            batch = len(old.seq_ids)
            stale_k, stale_v = mx.repeat(keys[:1], batch, 0), mx.repeat(values[:1], batch, 0)
            calls.append(("write stale slots", lambda: write_tokens_kv(pool, 1, old, stale_k, stale_v)))
        shared = self._shared_block_position(seq)
        if shared is not None:
            calls.append(("write into shared block", lambda: write_kv(pool, 0, seq, shared, keys[:1], values[:1])))
        return calls

    def _shared_block_position(self, seq: int) -> int | None:
        table = self.pool.book.table(seq)
        counts = self.pool.book.row_refcount
        for index, row in enumerate(table.rows):
            if counts[row] > 1 and index * BLOCK < self._length(seq):
                return index * BLOCK
        return None


    def shrink(self) -> None:
        """A shrink point: the gathers must not change (check_reference after every step proves it)."""
        report = self.pool.shrink()
        self.counts["shrink:moved"] += report.blocks_moved
        self.counts["shrink:released"] += report.slabs_released


VALID_OPS = ("new_sequence", "new_sequence", "write_span", "write_span", "write_batch", "decode_tokens", "release",
             "clone", "detach", "adopt", "release_handle", "trim", "logical_start", "shrink", "shrink", "reserve")


def run_fuzz(seed: int, design: str, steps: int, open_blocks: str = "low") -> Counter:
    """``steps`` random calls on a fresh pool; returns the outcome counts. Raises AssertionError on a violation."""
    fuzz = PoolFuzz(seed, design, open_blocks)
    for _ in range(steps):
        fuzz.step()
    fuzz.counts["cases"] = steps
    return fuzz.counts
