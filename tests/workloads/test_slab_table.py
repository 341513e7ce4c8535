"""The slab-table route of the fused decode (pool/kernels/slab_table.py) on the CPU: the refresh rule (which
entries a step rewrites, in how many update launches of which width), and the route end to end through the CPU
emulation (``paged_decode_emulated.EmulatedTableKernel``: a table entry is a snapshot of the slab it was written
from, so an entry that was not refreshed after a write reads the slab's old contents, as a stale device address
would). Attention through the table is compared with the gather route after decode writes, growth past a slab
and past the table's capacity, a new sequence's prefill, copy-on-write and a shrink's compaction."""

from __future__ import annotations

import pytest

from pool.kernels.slab_table import MAX_WRITES, SlabTables, table_capacity, write_bucket

BLOCK, SLAB_BLOCKS, HEADS, DIM, LAYERS = 4, 2, 2, 16, 2


class RecordingWriter:
    """A TableWriter that records each update's slots and table capacity (entries: slot -> the K array given)."""

    def __init__(self):
        self.calls = []

    def update(self, table, slots, slots_array, keys, values, capacity):
        self.calls.append((list(slots), capacity))
        entries = dict(table or {})
        entries.update(zip(slots, keys))
        return entries


def _pool(**config):
    from pool import PagedKVPool, PoolConfig

    return PagedKVPool(PoolConfig(num_layers=LAYERS, block_size=BLOCK, slab_blocks=SLAB_BLOCKS,
                                  **config))


def _write(pool, seq_ids, starts, tokens, seed):
    """Write ``tokens`` random tokens per sequence from ``starts`` in every layer (one step)."""
    import mlx.core as mx

    for seq_id, start in zip(seq_ids, starts):
        pool.prepare_write(seq_id, start, tokens)
    slots = pool.write_slots(seq_ids, starts, tokens)
    for layer in range(LAYERS):
        key = mx.random.key(seed * 100 + layer)
        k = mx.random.normal((len(seq_ids), tokens, HEADS, DIM), key=key)
        v = mx.random.normal((len(seq_ids), tokens, HEADS, DIM), key=mx.random.split(key)[0])
        pool.write(layer, slots, k, v)


def _prefill(pool, seq_id, tokens, seed):
    pool.add_sequence(seq_id)
    _write(pool, [seq_id], [0], tokens, seed)


def test_refresh_rule_rewrites_only_touched_slabs_in_bucketed_groups():
    pool = _pool()
    for seq_id, n in ((0, 7), (1, 9)):
        _prefill(pool, seq_id, n, seq_id)
    writer = RecordingWriter()
    tables = SlabTables(writer)
    count = pool.num_slabs()
    table = tables.table(pool.storage, 0)
    assert writer.calls == [(list(range(count)) + [0] * (write_bucket(count) - count), table_capacity(count))]
    assert tables.table(pool.storage, 0) is table and len(writer.calls) == 1  # nothing touched: no launch
    _write(pool, [0, 1], [7, 9], 1, seed=5)  # tokens 7 and 9: sequence 0's tail slab and sequence 1's
    written = sorted({pool.book.table(s).rows[p // BLOCK] // SLAB_BLOCKS for s, p in ((0, 7), (1, 9))})
    tables.table(pool.storage, 0)
    assert writer.calls[-1] == (written + [written[0]] * (write_bucket(len(written)) - len(written)),
                                table_capacity(count))
    tables.table(pool.storage, 1)  # layer 1 has its own table: all of its slabs once
    assert writer.calls[-1][0][:count] == list(range(count))
    # a prefill that touches more than MAX_WRITES slabs: several launches of at most MAX_WRITES, then a larger table
    _prefill(pool, 2, BLOCK * SLAB_BLOCKS * (MAX_WRITES + 10), seed=9)
    before = len(writer.calls)
    tables.table(pool.storage, 0)
    launches = writer.calls[before:]
    new = pool.num_slabs() - count
    assert [len(slots) for slots, _ in launches] == [MAX_WRITES, write_bucket(new + 1 - MAX_WRITES)] or \
        [len(slots) for slots, _ in launches] == [MAX_WRITES, write_bucket(new - MAX_WRITES)]
    assert all(capacity == table_capacity(pool.num_slabs()) for _, capacity in launches)
    refreshed = {slot for slots, _ in launches for slot in slots}
    assert set(range(count, pool.num_slabs())) <= refreshed


def test_write_bucket_and_capacity():
    assert [write_bucket(n) for n in (1, 2, 3, 5, 16, 17, 64)] == [1, 2, 4, 8, 16, 32, 64]
    with pytest.raises(ValueError):
        write_bucket(MAX_WRITES + 1)
    assert [table_capacity(n) for n in (1, 8, 9, 403)] == [8, 8, 16, 512]


@pytest.fixture
def emulated_table(monkeypatch):
    """The table route on a pretend backend "emu" whose kernel is the CPU emulation."""
    import pool.kernels.paged_decode as paged_decode
    from pool.kernels.paged_decode_emulated import EmulatedTableKernel

    monkeypatch.setitem(paged_decode.TABLE_KERNELS, "emu", EmulatedTableKernel)
    return "emu"


def _check_all_layers(pool, seq_ids, backend, label):
    """Fused (through the layer's table) against gather (float32), every layer; one plan and launch dict per step,
    as the live path shares them."""
    import mlx.core as mx

    from pool.kernels.paged_decode import fused_decode, gather_decode, plan_for_pool

    scale = DIM ** -0.5
    plan, launches = plan_for_pool(pool, seq_ids, scale=scale), {}
    for layer in range(LAYERS):
        queries = mx.random.normal((len(seq_ids), 2 * HEADS, 1, DIM), key=mx.random.key(layer + 7)) * 2
        fused = fused_decode(pool, layer, seq_ids, queries, scale=scale, backend=backend, plan=plan,
                             launches=launches)
        reference = gather_decode(pool, layer, seq_ids, queries, scale=scale, upcast=True)
        assert not mx.isnan(fused).any().item(), f"{label}, layer {layer}: read a table entry never written"
        diff = mx.abs(fused - reference).max().item()
        assert diff < 2e-5, f"{label}, layer {layer}: fused through the table differs from gather by {diff}"


def test_table_route_follows_writes_growth_prefill_cow_and_compaction(emulated_table):
    from pool import ShrinkPolicy

    pool = _pool(shrink=ShrinkPolicy("compact", 1 << 30, 0.5))
    for seq_id, n in ((0, 5), (1, 11), (2, 3)):
        _prefill(pool, seq_id, n, seq_id)
    ids, lengths = [0, 1, 2], {0: 5, 1: 11, 2: 3}
    _check_all_layers(pool, ids, emulated_table, "after prefill")
    for step in range(20):  # decode steps: tail slabs written every step, new slabs appended past slab boundaries
        _write(pool, ids, [lengths[s] for s in ids], 1, seed=50 + step)
        for s in ids:
            lengths[s] += 1
        _check_all_layers(pool, ids, emulated_table, f"decode step {step}")
    assert pool.num_slabs() > table_capacity(1)  # grew past the first table's capacity
    _prefill(pool, 3, 13, seed=3)  # a new sequence's prefill (span writes) between decode steps
    ids, lengths[3] = ids + [3], 13
    _check_all_layers(pool, ids, emulated_table, "after a new prefill")
    pool.clone(1, 4, lengths[1])  # copy-on-write at the clone's first write into the shared tail block
    ids, lengths[4] = ids + [4], lengths[1]
    _write(pool, [4], [lengths[4]], 1, seed=77)
    lengths[4] += 1
    _check_all_layers(pool, ids, emulated_table, "after copy-on-write")
    for gone in (0, 2, 3):  # leaves the clone's copied row alone in the top slab: it moves below
        pool.release(gone)
        ids.remove(gone)
    report = pool.shrink()
    assert report.bytes_moved > 0, "the shrink must compact (move rows into lower slabs) for this test"
    _check_all_layers(pool, ids, emulated_table, "after a shrink's compaction")
    _write(pool, ids, [lengths[s] for s in ids], 1, seed=99)
    for s in ids:
        lengths[s] += 1
    _check_all_layers(pool, ids, emulated_table, "decode after the shrink")
    pool.check_integrity()


def test_a_copy_on_write_refreshes_the_destination_slab_before_any_write(emulated_table):
    """prepare_write copies a shared tail block into a new row (a new buffer for its slab); attention read before
    the token lands (what a step that fails after its preparation leaves) must see the copied row, not the slab's
    old buffer."""
    pool = _pool()
    for seq_id, n in ((0, 6), (1, 10)):
        _prefill(pool, seq_id, n, seq_id)
    _check_all_layers(pool, [0, 1], emulated_table, "before the clone")
    pool.clone(1, 2, 10)
    pool.prepare_write(2, 10, 1)  # the shared block (tokens 8-11) is copied into a row of its own
    assert pool.book.table(2).rows[-1] != pool.book.table(1).rows[-1]
    # the token is not written: the sequence's visible blocks end with the copied one (its position 10 holds what
    # the source block held there, read the same way by gather and by the kernel)
    _check_all_layers(pool, [0, 1, 2], emulated_table, "after copy-on-write, nothing written")


def test_a_decode_step_refreshes_one_launch_per_layer(emulated_table):
    from pool.kernels.paged_decode_emulated import EmulatedTableKernel

    pool = _pool()
    for seq_id, n in ((0, 30), (1, 50)):
        _prefill(pool, seq_id, n, seq_id)
    _check_all_layers(pool, [0, 1], emulated_table, "warm")
    tables = pool.storage.kernel_state[EmulatedTableKernel.name]
    before = tables.updates
    _write(pool, [0, 1], [30, 50], 1, seed=4)
    _check_all_layers(pool, [0, 1], emulated_table, "step")
    assert tables.updates - before == LAYERS  # two written slabs per layer: one launch of width 2 each
    _check_all_layers(pool, [0, 1], emulated_table, "no write")
    assert tables.updates - before == LAYERS  # nothing written since: the tables are reused as they are


@pytest.mark.numerics
def test_live_decode_through_the_table_route_matches_gather(tiny_qwen3, tmp_path, monkeypatch):
    """The product's fused route (decisions, step plans, ``fused_decode``) on a pretend backend whose table-route
    kernel is the emulation: a burst with prefills, growth and finishing requests gives the gather run's greedy
    tokens within the float32 reorder tolerance, and every decode layer went through a table."""
    import pool.fused_decision as fd
    import pool.kernels.paged_decode as paged_decode
    from app.workloads.fused_attention import KernelRoute
    from pool.fused_decision import KernelCaps, register_kernel, unregister_kernel
    from pool.kernels.paged_decode_emulated import EmulatedTableKernel

    from .helpers import assert_close_logits, burst_toml, run_backend, write_scenario

    tables = []
    original_slab_tables = __import__("pool.kernels.slab_table", fromlist=["x"]).slab_tables

    def spying_slab_tables(storage, name, make_writer):
        found = original_slab_tables(storage, name, make_writer)
        tables.append(found)
        return found

    monkeypatch.setattr("pool.kernels.slab_table.slab_tables", spying_slab_tables)
    monkeypatch.setitem(paged_decode.TABLE_KERNELS, "metal", EmulatedTableKernel)
    monkeypatch.setattr(fd, "detect_backend", lambda: "metal")
    monkeypatch.delenv("SLABSCOPE_PAGED_ATTENTION_NATIVE", raising=False)

    def register():
        register_kernel(KernelCaps(backend="metal", dtypes=frozenset({"float32"}), head_dims=frozenset({16, 32}),
                                   multi_slab=True))
        return ["metal"]

    scenario = write_scenario(tmp_path, burst_toml(n=3, concurrency=3, prompt_tokens="[9, 40]", gen_tokens="[4, 9]"))
    pool = dict(block_size=4, slab_blocks=2, prefill_chunk=16, prefix_cache=False)
    try:
        _, _, fused = run_backend(tiny_qwen3, scenario, "slab", kernel_route=KernelRoute(
            register=register, backend="metal"), **pool)
    finally:
        unregister_kernel("metal")
    assert tables and tables[0].updates > 0
    monkeypatch.setenv("SLABSCOPE_PAGED_ATTENTION_NATIVE", "0")
    _, _, gathered = run_backend(tiny_qwen3, scenario, "slab", **pool)
    assert_close_logits(fused, gathered, "table route vs gather")


def test_a_dropped_pool_frees_its_storage_and_tables_without_the_garbage_collector(emulated_table):
    """The tables live in the storage and hold no reference back: no cycle keeps a finished engine's slabs alive
    until a collection (bench throughput releases each engine's memory before the next runs)."""
    import gc
    import weakref

    pool = _pool()
    _prefill(pool, 0, 9, seed=1)
    _check_all_layers(pool, [0], emulated_table, "one sequence")
    storage = weakref.ref(pool.storage)
    gc.disable()
    try:
        del pool
        assert storage() is None
    finally:
        gc.enable()
