"""The table write (pool/kernels/table_write.py) on the CPU through its emulation: a step's tokens (a decode step's
one per sequence, a prefill chunk's many) stored through the slab table in one launch per layer must leave the
storage exactly as MLX's own writes leave it (every later reader through MLX operations sees them), hand the
decode kernel a table that reads them, follow growth and copy-on-write (the table is refreshed before the write),
and give a live run's logits bit for bit."""

from __future__ import annotations

import pytest

BLOCK, SLAB_BLOCKS, HEADS, DIM, LAYERS = 4, 2, 2, 16, 2


@pytest.fixture
def emulated_write(monkeypatch):
    """Table kernel and write kernel of the CPU emulation on a pretend backend "emu"; returns its route."""
    import pool.kernels.paged_decode as paged_decode
    import pool.kernels.table_write as table_write
    from pool.kernels.paged_decode_emulated import EmulatedTableKernel
    from pool.kernels.table_write_emulated import EmulatedTableWrite

    monkeypatch.setitem(paged_decode.TABLE_KERNELS, "emu", EmulatedTableKernel)
    monkeypatch.setitem(table_write.WRITE_KERNELS, "emu", EmulatedTableWrite)
    monkeypatch.delenv(table_write.WRITE_ENV, raising=False)
    route = table_write.write_route("emu")
    assert route is not None
    return route


def _pools(route):
    """Twin pools: one written through the table, one by MLX."""
    from pool import PagedKVPool, PoolConfig

    config = PoolConfig(num_layers=LAYERS, block_size=BLOCK, slab_blocks=SLAB_BLOCKS)
    through, by_mlx = PagedKVPool(config), PagedKVPool(config)
    through.write_route = route
    return through, by_mlx


def _write(pool, seq_ids, starts, tokens, seed, through_table=False):
    import mlx.core as mx

    for seq_id, start in zip(seq_ids, starts):
        pool.prepare_write(seq_id, start, tokens)
    slots = pool.write_slots(seq_ids, starts, tokens)
    for layer in range(LAYERS):
        key = mx.random.key(seed * 100 + layer)
        k = mx.random.normal((len(seq_ids), tokens, HEADS, DIM), key=key)
        v = mx.random.normal((len(seq_ids), tokens, HEADS, DIM), key=mx.random.split(key)[0])
        pool.write(layer, slots, k, v, through_table=through_table)


def _same_storage(a, b, label):
    import mlx.core as mx

    for layer in range(LAYERS):
        for name in ("keys", "values"):
            left, right = getattr(a.storage, name)[layer], getattr(b.storage, name)[layer]
            assert len(left) == len(right), label
            for s, (x, y) in enumerate(zip(left, right)):
                assert mx.array_equal(x, y).item(), f"{label}: layer {layer} {name} slab {s} differs"


def _same_attention(a, b, seq_ids, label):
    """The fused decode through each pool's table gives the same bits (the same emulated kernel on the same data)."""
    import mlx.core as mx

    from pool.kernels.paged_decode import fused_decode, plan_for_pool

    scale = DIM ** -0.5
    for layer in range(LAYERS):
        queries = mx.random.normal((len(seq_ids), 2 * HEADS, 1, DIM), key=mx.random.key(layer + 3))
        out_a = fused_decode(a, layer, seq_ids, queries, scale=scale, backend="emu",
                             plan=plan_for_pool(a, seq_ids, scale=scale))
        out_b = fused_decode(b, layer, seq_ids, queries, scale=scale, backend="emu",
                             plan=plan_for_pool(b, seq_ids, scale=scale))
        assert not mx.isnan(out_a).any().item(), f"{label}: layer {layer} read an entry never written"
        assert mx.array_equal(out_a, out_b).item(), f"{label}: layer {layer} attention differs"


def test_writes_through_the_table_equal_mlx_writes_through_growth_and_copy_on_write(emulated_write):
    through, by_mlx = _pools(emulated_write)
    lengths = {0: 7, 1: 9, 2: 3}
    for pool, flag in ((through, True), (by_mlx, False)):
        for seq_id, n in lengths.items():  # prefill chunks: from token 0, partial last blocks
            pool.add_sequence(seq_id)
            _write(pool, [seq_id], [0], n, seed=seq_id, through_table=flag)
    _same_storage(through, by_mlx, "after prefill")
    _same_attention(through, by_mlx, [0, 1, 2], "after prefill")
    ids = [0, 1, 2]
    for step in range(12):  # crosses block and slab boundaries: growth between steps
        for pool, flag in ((through, True), (by_mlx, False)):
            _write(pool, ids, [lengths[s] for s in ids], 1, seed=40 + step, through_table=flag)
        for s in ids:
            lengths[s] += 1
        _same_attention(through, by_mlx, ids, f"decode step {step}")
        _same_storage(through, by_mlx, f"decode step {step}")
    for pool in (through, by_mlx):  # copy-on-write at the clone's first write: a new row, refreshed before writing
        pool.clone(1, 4, lengths[1])
    lengths[4] = lengths[1]
    for pool, flag in ((through, True), (by_mlx, False)):
        _write(pool, [4, 0], [lengths[4], lengths[0]], 1, seed=90, through_table=flag)
    _same_storage(through, by_mlx, "after copy-on-write")
    _same_attention(through, by_mlx, [4, 0], "after copy-on-write")
    assert emulated_write.launches == 16 * LAYERS
    through.check_integrity()


def test_a_batched_chunk_through_the_table_equals_mlx_writes(emulated_write):
    """A prefill chunk of three sequences at one start (a batched chunk: from mid-block, across blocks and slabs,
    to mid-block), then a chunk of two: one launch a layer each, storage byte-equal to MLX's writes."""
    through, by_mlx = _pools(emulated_write)
    for pool, flag in ((through, True), (by_mlx, False)):
        for seq_id in (2, 0, 1):
            pool.add_sequence(seq_id)
        _write(pool, [2, 0, 1], [0, 0, 0], 6, seed=7, through_table=flag)
        _write(pool, [2, 0, 1], [6, 6, 6], 11, seed=8, through_table=flag)
        _write(pool, [1, 0], [17, 17], 3, seed=9, through_table=flag)
    _same_storage(through, by_mlx, "after the batched chunks")
    _same_attention(through, by_mlx, [2, 0, 1], "after the batched chunks")
    assert emulated_write.launches == 3 * LAYERS
    through.check_integrity()


def test_a_write_through_a_stale_table_is_lost_to_mlx_readers(emulated_write):
    """What the refresh before the write guards: through a table that missed a slab's new buffer, the token
    lands in the old buffer and MLX's readers never see it (the emulation models the device's aliasing)."""
    import mlx.core as mx

    from pool.kernels.paged_decode_emulated import EmulatedTableKernel
    from pool.kernels.slab_table import slab_tables

    through, by_mlx = _pools(emulated_write)
    for pool in (through, by_mlx):
        pool.add_sequence(0)
        _write(pool, [0], [0], 5, seed=1)
    tables = slab_tables(through.storage, EmulatedTableKernel.name, lambda: EmulatedTableKernel().writer("float32"))
    for layer in range(LAYERS):
        tables.table(through.storage, layer)
    for pool in (through, by_mlx):
        _write(pool, [0], [5], 1, seed=2)  # MLX writes: a new array for the tail slab, its stamp moves
    for layer in range(LAYERS):  # pretend the refresh did not happen
        tables.layers[layer].seen[:] = through.storage.slab_stamps[layer][:tables.layers[layer].capacity]
    for pool, flag in ((through, True), (by_mlx, False)):
        _write(pool, [0], [6], 1, seed=3, through_table=flag)
    k, _, _ = through.storage.gather(0, list(through.book.table(0).rows), 0, 7)
    want, _, _ = by_mlx.storage.gather(0, list(by_mlx.book.table(0).rows), 0, 7)
    assert not mx.array_equal(k, want).item()


def test_the_route_is_taken_only_through_the_table(emulated_write):
    through, _ = _pools(emulated_write)
    through.add_sequence(0)
    _write(through, [0], [0], 5, seed=1)  # not through the table: MLX's writes, a span and a token
    _write(through, [0], [5], 1, seed=2)
    assert emulated_write.launches == 0
    _write(through, [0], [6], 1, seed=3, through_table=True)
    _write(through, [0], [7], 4, seed=4, through_table=True)
    assert emulated_write.launches == 2 * LAYERS


@pytest.mark.numerics
def test_a_live_run_through_the_table_write_gives_mlx_writes_logits(tiny_qwen3, tmp_path, monkeypatch):
    """A burst decoding through the emulated table route with the table write on and off: byte-identical logits
    (the same fused kernel reads the same data), and the write route stored every fused layer's tokens."""
    import pool.fused_decision as fd
    import pool.kernels.paged_decode as paged_decode
    import pool.kernels.table_write as table_write
    from app.workloads.fused_attention import KernelRoute
    from pool.fused_decision import KernelCaps, register_kernel, unregister_kernel
    from pool.kernels.paged_decode_emulated import EmulatedTableKernel
    from pool.kernels.table_write_emulated import EmulatedTableWrite

    from .helpers import assert_same_logits, burst_toml, run_backend, write_scenario

    launches = []
    original = table_write.TableWriteRoute.write

    def counting_write(self, *args):
        launches.append(1)
        return original(self, *args)

    monkeypatch.setattr(table_write.TableWriteRoute, "write", counting_write)
    monkeypatch.setitem(paged_decode.TABLE_KERNELS, "metal", EmulatedTableKernel)
    monkeypatch.setitem(table_write.WRITE_KERNELS, "metal", EmulatedTableWrite)
    monkeypatch.setattr(fd, "detect_backend", lambda: "metal")
    monkeypatch.delenv("SLABSCOPE_PAGED_ATTENTION_NATIVE", raising=False)

    def register():
        register_kernel(KernelCaps(backend="metal", dtypes=frozenset({"float32"}), head_dims=frozenset({16, 32}),
                                   multi_slab=True))
        return ["metal"]

    scenario = write_scenario(tmp_path, burst_toml(n=3, concurrency=3, prompt_tokens="[9, 40]", gen_tokens="[4, 9]"))
    pool = dict(block_size=4, slab_blocks=2, prefill_chunk=16, prefix_cache=False)

    def run():
        try:
            return run_backend(tiny_qwen3, scenario, "slab", kernel_route=KernelRoute(register=register,
                                                                                      backend="metal"), **pool)[2]
        finally:
            unregister_kernel("metal")

    monkeypatch.delenv(table_write.WRITE_ENV, raising=False)
    through_table = run()
    assert launches, "no decode write went through the table"
    count = len(launches)
    monkeypatch.setenv(table_write.WRITE_ENV, "0")
    by_mlx = run()
    assert len(launches) == count
    assert_same_logits(through_table, by_mlx, "table write vs MLX writes")


LIVE_CASES = {
    # rows freed and reused, a compaction moving rows between slabs at shrink points
    "churn": dict(overrides={"n": 5, "concurrency": 3, "prompt_min": 9, "prompt_max": 60, "gen_min": 3,
                             "gen_max": 9}, shrink="compact"),
    # each turn resumes the kept K/V: its shared partial block is copied on the first write
    "multiturn": dict(overrides={"turns": 3, "user_tokens": 14, "gen_tokens": 5}),
    # a cached prefix shared by refcount: history gathers start from shared rows
    "shared_prefix_burst": dict(overrides={"prefix_tokens": 40, "n": 3, "suffix_min": 3, "suffix_max": 9,
                                           "gen_tokens": 4}),
}


@pytest.mark.numerics
@pytest.mark.parametrize("scenario", sorted(LIVE_CASES))
def test_table_routes_give_mlx_routes_logits_through_reuse_sharing_and_compaction(scenario, tiny_qwen3,
                                                                                   monkeypatch):
    """The table gather and the table write together (emulated, on a pretend backend) against both switched off,
    through row reuse and a compaction (churn with shrink=compact), copy-on-write of a resumed conversation's
    partial block (multiturn) and a shared cached prefix (shared_prefix_burst): byte-identical logits, prefill
    chunks written through the table as well as decode tokens."""
    import pool.fused_decision as fd
    import pool.kernels.paged_decode as paged_decode
    import pool.kernels.table_gather as table_gather
    import pool.kernels.table_write as table_write
    from app.workloads.fused_attention import KernelRoute
    from pool.fused_decision import KernelCaps, register_kernel, unregister_kernel
    from pool.kernels.paged_decode_emulated import EmulatedTableKernel
    from pool.kernels.table_gather_emulated import EmulatedTableGather
    from pool.kernels.table_write_emulated import EmulatedTableWrite

    from .helpers import assert_same_logits, run_backend

    monkeypatch.setitem(paged_decode.TABLE_KERNELS, "metal", EmulatedTableKernel)
    monkeypatch.setitem(table_write.WRITE_KERNELS, "metal", EmulatedTableWrite)
    monkeypatch.setitem(table_gather.GATHER_KERNELS, "metal", EmulatedTableGather)
    monkeypatch.setattr(fd, "detect_backend", lambda: "metal")
    monkeypatch.delenv("SLABSCOPE_PAGED_ATTENTION_NATIVE", raising=False)
    launches = {"write": 0, "chunk": 0}
    original = table_write.TableWriteRoute.write

    def counting_write(self, storage, layer, slots, keys, values):
        launches["write"] += 1
        launches["chunk"] += slots.num_tokens > 1  # a prefill chunk's tokens through the table
        return original(self, storage, layer, slots, keys, values)

    monkeypatch.setattr(table_write.TableWriteRoute, "write", counting_write)

    def register():
        register_kernel(KernelCaps(backend="metal", dtypes=frozenset({"float32"}), head_dims=frozenset({16, 32}),
                                   multi_slab=True))
        return ["metal"]

    def run():
        try:
            return run_backend(tiny_qwen3, scenario, "slab", kernel_route=KernelRoute(
                register=register, backend="metal"), block_size=4, slab_blocks=2, prefill_chunk=16,
                **LIVE_CASES[scenario])[2]
        finally:
            unregister_kernel("metal")

    for name in (table_write.WRITE_ENV, table_gather.GATHER_ENV):
        monkeypatch.delenv(name, raising=False)
    through_tables = run()
    assert launches["write"] > launches["chunk"] > 0
    for name in (table_write.WRITE_ENV, table_gather.GATHER_ENV):
        monkeypatch.setenv(name, "0")
    by_mlx = run()
    assert_same_logits(through_tables, by_mlx, f"{scenario}: table routes vs MLX's")


def test_a_chunk_reading_slab_views_is_written_by_mlx(tiny_qwen3, monkeypatch):
    """With the in-place prefill reads opted in (``SLABSCOPE_PAGED_PREFILL=1``), a chunk with history reads slab
    views through MLX operations, which would not wait for a write MLX does not see: its writes stay MLX's, while a
    first chunk (nothing read) and, with the opt-in off, gathered chunks go through the table."""
    import pool.fused_decision as fd
    import pool.kernels.paged_decode as paged_decode
    import pool.kernels.table_gather as table_gather
    import pool.kernels.table_write as table_write
    from app.workloads.fused_attention import KernelRoute
    from pool.fused_decision import KernelCaps, register_kernel, unregister_kernel
    from pool.kernels.paged_decode_emulated import EmulatedTableKernel
    from pool.kernels.table_gather_emulated import EmulatedTableGather
    from pool.kernels.table_write_emulated import EmulatedTableWrite
    from pool.pool import PagedKVPool

    from .helpers import run_backend

    monkeypatch.setitem(paged_decode.TABLE_KERNELS, "metal", EmulatedTableKernel)
    monkeypatch.setitem(table_write.WRITE_KERNELS, "metal", EmulatedTableWrite)
    monkeypatch.setitem(table_gather.GATHER_KERNELS, "metal", EmulatedTableGather)
    monkeypatch.setattr(fd, "detect_backend", lambda: "metal")
    for name in (table_write.WRITE_ENV, table_gather.GATHER_ENV):
        monkeypatch.delenv(name, raising=False)
    chunks = []  # (start, through_table) of each prefill chunk's write in layer 1
    original = PagedKVPool.write

    def recording_write(pool, layer, slots, keys, values, *, through_table=False):
        if layer == 1 and slots.num_tokens > 1:
            chunks.append((slots.starts[0], through_table))
        return original(pool, layer, slots, keys, values, through_table=through_table)

    monkeypatch.setattr(PagedKVPool, "write", recording_write)

    def register():
        register_kernel(KernelCaps(backend="metal", dtypes=frozenset({"float32"}), head_dims=frozenset({16, 32}),
                                   multi_slab=True))
        return ["metal"]

    def run(paged):
        monkeypatch.setenv("SLABSCOPE_PAGED_PREFILL", paged)
        chunks.clear()
        try:
            run_backend(tiny_qwen3, "distinct_burst", "slab", kernel_route=KernelRoute(register=register,
                        backend="metal"), block_size=4, slab_blocks=2, prefill_chunk=8,
                        overrides={"n": 2, "prompt_tokens": 30, "gen_tokens": 2})
        finally:
            unregister_kernel("metal")
        return list(chunks)

    opted_in = run("1")
    assert {start for start, _ in opted_in} == {0, 8, 16, 24}
    assert all(through == (start == 0) for start, through in opted_in), opted_in
    assert all(through for _, through in run("0")), "gathered chunks read through the table: written through it"
