"""Seeded random schedules on twin pools, one written and read through the slab table's routes (the CPU emulation
of the table write, the table gather and the fused decode), one through MLX's writes and the storage's gather: after
every operation (prefills, decode steps, clones written on copy, releases, compacting shrinks) both pools must hold
the same bits in every slab, and every live sequence must read the same through the tables as through MLX. The
schedules are what the GPU path meets in a serving run; the refresh rule, the write's table hand-off and the
gather's meta are all exercised against a reference that shares none of them."""

from __future__ import annotations

import random

import pytest

BLOCK, SLAB_BLOCKS, HEADS, DIM, LAYERS = 4, 2, 2, 8, 2
SEEDS = (1, 2, 3)
OPERATIONS = 40


@pytest.fixture
def emulated(monkeypatch):
    import pool.kernels.paged_decode as paged_decode
    import pool.kernels.table_gather as table_gather
    import pool.kernels.table_write as table_write
    from pool.kernels.paged_decode_emulated import EmulatedTableKernel
    from pool.kernels.table_gather_emulated import EmulatedTableGather
    from pool.kernels.table_write_emulated import EmulatedTableWrite

    monkeypatch.setitem(paged_decode.TABLE_KERNELS, "emu", EmulatedTableKernel)
    monkeypatch.setitem(table_gather.GATHER_KERNELS, "emu", EmulatedTableGather)
    monkeypatch.setitem(table_write.WRITE_KERNELS, "emu", EmulatedTableWrite)
    for name in (table_gather.GATHER_ENV, table_write.WRITE_ENV):
        monkeypatch.delenv(name, raising=False)
    return table_gather.gather_route("emu"), table_write.write_route("emu")


class Twins:
    """The two pools and the schedule's state (lengths per live sequence)."""

    def __init__(self, routes):
        from pool import PagedKVPool, PoolConfig, ShrinkPolicy

        config = PoolConfig(num_layers=LAYERS, block_size=BLOCK, slab_blocks=SLAB_BLOCKS,
                            shrink=ShrinkPolicy("compact", 1 << 30, 0.5))
        self.tables, self.mlx = PagedKVPool(config), PagedKVPool(config)
        self.tables.gather_route, self.tables.write_route = routes
        self.lengths: dict[int, int] = {}
        self.next_id = 0

    def write(self, ids, starts, tokens, seed, through_table):
        import mlx.core as mx

        for pool, flag in ((self.tables, through_table), (self.mlx, False)):
            for seq_id, start in zip(ids, starts):
                pool.prepare_write(seq_id, start, tokens)
            slots = pool.write_slots(ids, starts, tokens)
            for layer in range(LAYERS):
                key = mx.random.key(seed * 97 + layer)
                k = mx.random.normal((len(ids), tokens, HEADS, DIM), key=key)
                v = mx.random.normal((len(ids), tokens, HEADS, DIM), key=mx.random.split(key)[0])
                pool.write(layer, slots, k, v, through_table=flag)

    def prefill(self, rng, seed):
        seq_id, self.next_id = self.next_id, self.next_id + 1
        for pool in (self.tables, self.mlx):
            pool.add_sequence(seq_id)
        total, start = rng.randint(1, 30), 0
        while start < total:  # chunks of up to 8 tokens, written by MLX as a prefill's spans are
            chunk = min(8, total - start)
            self.write([seq_id], [start], chunk, seed + start, through_table=False)
            start += chunk
        self.lengths[seq_id] = total

    def decode(self, seed):
        ids = sorted(self.lengths)
        self.write(ids, [self.lengths[s] for s in ids], 1, seed, through_table=True)
        for s in ids:
            self.lengths[s] += 1

    def clone(self, rng):
        src = rng.choice(sorted(self.lengths))
        dst, self.next_id = self.next_id, self.next_id + 1
        for pool in (self.tables, self.mlx):
            pool.clone(src, dst, self.lengths[src])
        self.lengths[dst] = self.lengths[src]

    def release(self, rng):
        gone = rng.choice(sorted(self.lengths))
        for pool in (self.tables, self.mlx):
            pool.release(gone)
        del self.lengths[gone]

    def shrink(self):
        """Both pools shrink at the same point (the same rows move: the bookkeeping is the same; the bytes each
        reports are measured from MLX's allocator, so they are not compared)."""
        for pool in (self.tables, self.mlx):
            pool.shrink()

    def check(self, label):
        import mlx.core as mx

        from pool.kernels.paged_decode import fused_decode, plan_for_pool

        for layer in range(LAYERS):
            for name in ("keys", "values"):
                ours, theirs = getattr(self.tables.storage, name)[layer], getattr(self.mlx.storage, name)[layer]
                assert len(ours) == len(theirs), label
                for s, (x, y) in enumerate(zip(ours, theirs)):
                    assert mx.array_equal(x, y).item(), f"{label}: layer {layer} {name} slab {s}"
        ids = sorted(self.lengths)
        if not ids:
            return
        scale = DIM ** -0.5
        for layer in range(LAYERS):  # gathers first: a gather must refresh the table itself (a prefill's writes)
            for seq_id in ids:
                ours = self.tables.gather_visible(layer, seq_id, "prefill")
                theirs = self.mlx.gather_visible(layer, seq_id, "prefill")
                assert mx.array_equal(ours.keys, theirs.keys).item(), f"{label}: seq {seq_id} gathered K"
                assert mx.array_equal(ours.values, theirs.values).item(), f"{label}: seq {seq_id} gathered V"
            queries = mx.random.normal((len(ids), 2 * HEADS, 1, DIM), key=mx.random.key(layer))
            outs = [fused_decode(pool, layer, ids, queries, scale=scale, backend="emu",
                                 plan=plan_for_pool(pool, ids, scale=scale)) for pool in (self.tables, self.mlx)]
            assert mx.array_equal(outs[0], outs[1]).item(), f"{label}: layer {layer} attention through the tables"


@pytest.mark.parametrize("seed", SEEDS)
def test_random_schedules_read_and_write_the_same_through_the_tables(seed, emulated):
    rng = random.Random(seed)
    twins = Twins(emulated)
    kinds = ["prefill", "decode", "decode", "decode", "clone", "release", "shrink"]
    for step in range(OPERATIONS):
        kind = rng.choice(kinds) if twins.lengths else "prefill"
        if kind == "prefill" or (kind in ("clone", "release") and len(twins.lengths) < 2):
            twins.prefill(rng, seed * 1000 + step)
            kind = "prefill"
        elif kind == "decode":
            twins.decode(seed * 1000 + step)
        elif kind == "clone":
            twins.clone(rng)
        elif kind == "release":
            twins.release(rng)
        else:
            twins.shrink()
        twins.check(f"seed {seed}, operation {step} ({kind})")
    twins.tables.check_integrity()
    gather_route, write_route = emulated
    assert write_route.launches > 0 and gather_route.launches > 0
