"""The table gather (pool/kernels/table_gather.py) on the CPU through its emulation: a history gather made of one
launch per layer reading slabs through the slab table must return exactly what the storage's per-run gather
returns (it is a copy: byte-identical), see every write (the shared table refresh), and give a live run's logits
bit for bit."""

from __future__ import annotations

import pytest

BLOCK, SLAB_BLOCKS, HEADS, DIM, LAYERS = 4, 2, 2, 16, 2


@pytest.fixture
def emulated_gather(monkeypatch):
    """Table kernel and gather kernel of the CPU emulation on a pretend backend "emu"; returns its route."""
    import pool.kernels.paged_decode as paged_decode
    import pool.kernels.table_gather as table_gather
    from pool.kernels.paged_decode_emulated import EmulatedTableKernel
    from pool.kernels.table_gather_emulated import EmulatedTableGather

    monkeypatch.setitem(paged_decode.TABLE_KERNELS, "emu", EmulatedTableKernel)
    monkeypatch.setitem(table_gather.GATHER_KERNELS, "emu", EmulatedTableGather)
    monkeypatch.delenv(table_gather.GATHER_ENV, raising=False)
    route = table_gather.gather_route("emu")
    assert route is not None
    return route


def _pool():
    from pool import PagedKVPool, PoolConfig

    return PagedKVPool(PoolConfig(num_layers=LAYERS, block_size=BLOCK, slab_blocks=SLAB_BLOCKS))


def _write(pool, seq_ids, starts, tokens, seed):
    import mlx.core as mx

    for seq_id, start in zip(seq_ids, starts):
        pool.prepare_write(seq_id, start, tokens)
    slots = pool.write_slots(seq_ids, starts, tokens)
    for layer in range(LAYERS):
        key = mx.random.key(seed * 100 + layer)
        k = mx.random.normal((len(seq_ids), tokens, HEADS, DIM), key=key)
        v = mx.random.normal((len(seq_ids), tokens, HEADS, DIM), key=mx.random.split(key)[0])
        pool.write(layer, slots, k, v)


def _check_equal(pool, route, seq_ids, label):
    """Every layer, every sequence: the route's gather equals the storage's per-run gather byte for byte (runs
    too); windows with a partial first and last block as well as the whole table."""
    import mlx.core as mx

    for seq_id in seq_ids:
        table = pool.book.table(seq_id)
        rows = table.rows[:-(-table.length // BLOCK)]
        for lo, hi in ((0, table.length), (1, table.length), (BLOCK + 1, table.length - 1)):
            if hi <= lo:
                continue
            for layer in range(LAYERS):
                want_k, want_v, want_runs = pool.storage.gather(layer, rows, lo, hi)
                k, v, runs = route.gather(pool.storage, layer, rows, lo, hi)
                where = f"{label}: seq {seq_id} layer {layer} tokens [{lo}, {hi})"
                assert k.shape == want_k.shape and runs == want_runs, where
                assert mx.array_equal(k, want_k) and mx.array_equal(v, want_v), f"{where}: gathered K/V differ"


def test_table_gather_equals_the_per_run_gather_through_writes_and_growth(emulated_gather):
    pool = _pool()
    lengths = {}
    for seq_id, n in ((0, 7), (1, 9), (2, 3)):  # interleaved prefills: every table jumps between slabs
        pool.add_sequence(seq_id)
        _write(pool, [seq_id], [0], n, seed=seq_id)
        lengths[seq_id] = n
    _check_equal(pool, emulated_gather, [0, 1, 2], "after prefill")
    for step in range(9):  # decode writes land in the tail slabs the table must refresh
        ids = [0, 1, 2]
        _write(pool, ids, [lengths[s] for s in ids], 1, seed=20 + step)
        for s in ids:
            lengths[s] += 1
        _check_equal(pool, emulated_gather, ids, f"decode step {step}")
    pool.add_sequence(3)
    _write(pool, [3], [0], BLOCK * SLAB_BLOCKS * 5 + 3, seed=3)  # a long prefill: many slabs, more than the table
    _check_equal(pool, emulated_gather, [0, 1, 2, 3], "after a long prefill")
    assert emulated_gather.launches > 0
    pool.check_integrity()


def test_the_route_reads_the_chunk_written_just_before_it(emulated_gather):
    """A prefill chunk writes, then gathers in the same layer: the gather must see the chunk (the shared table is
    refreshed for the slabs the write touched). A route that skipped the refresh reads the stale snapshot."""
    import mlx.core as mx

    pool = _pool()
    pool.add_sequence(0)
    _write(pool, [0], [0], 6, seed=1)
    _check_equal(pool, emulated_gather, [0], "first chunk")
    _write(pool, [0], [6], 6, seed=2)  # row 1's second half and a new row in a new slab
    rows = pool.book.table(0).rows[:3]
    k, _, _ = emulated_gather.gather(pool.storage, 0, rows, 0, 12)
    want, _, _ = pool.storage.gather(0, rows, 0, 12)
    assert mx.array_equal(k[:, 6:], want[:, 6:]), "the gather missed the chunk written just before it"


def test_meta_is_built_once_per_sequence_of_a_chunk_not_per_layer(emulated_gather, monkeypatch):
    """A batched chunk's sequences alternate within each layer: each keeps its meta array across the layers."""
    import pool.kernels.table_gather as table_gather

    pool = _pool()
    for seq_id in (0, 1):
        pool.add_sequence(seq_id)
    _write(pool, [0, 1], [0, 0], 30, seed=5)
    built = []
    original = table_gather.gather_meta
    monkeypatch.setattr(table_gather, "gather_meta", lambda *a: built.append(a) or original(*a))
    tables = [pool.book.table(seq_id).rows[:8] for seq_id in (0, 1)]
    for layer in range(LAYERS):
        for rows in tables:
            emulated_gather.gather(pool.storage, layer, rows, 0, 30)
    assert len(built) == 2 and emulated_gather.launches == 2 * LAYERS
    _check_equal(pool, emulated_gather, [0, 1], "a batch's gathers through the memo")


@pytest.mark.parametrize("through_route", [True, False])
def test_a_batch_gathered_in_one_read_equals_each_sequence_gathered_alone(emulated_gather, through_route):
    """``gather_batch``: sequences of the same length read as one row list (one launch on the table route, one
    storage gather without it), then laid out [B, H, T, D]: byte-identical to stacking each sequence's
    ``gather_visible`` (a partial last block too), with the same gather and run counts; None where lengths differ."""
    import mlx.core as mx

    pool = _pool()
    pool.gather_route = emulated_gather if through_route else None
    order = [2, 0, 1]
    for seq_id in order:
        pool.add_sequence(seq_id)
    _write(pool, order, [0, 0, 0], 12, seed=3)  # three blocks each: rows interleave across slabs
    _write(pool, order, [12, 12, 12], 8, seed=4)
    launches = emulated_gather.launches
    for layer in range(LAYERS):
        before = (pool.gathers, pool.gather_runs_total, dict(pool.gather_runs_hist[layer]))
        alone = [pool.gather_visible(layer, seq_id, "prefill") for seq_id in order]
        counted = (pool.gathers, pool.gather_runs_total, dict(pool.gather_runs_hist[layer]))
        batch = pool.gather_batch(layer, order, "prefill")
        assert batch.keys.shape == (3, HEADS, 20, DIM)
        assert mx.array_equal(batch.keys, mx.stack([r.keys for r in alone]))
        assert mx.array_equal(batch.values, mx.stack([r.values for r in alone]))
        assert batch.num_runs == sum(r.num_runs for r in alone)
        after = (pool.gathers, pool.gather_runs_total, dict(pool.gather_runs_hist[layer]))
        assert after[0] - counted[0] == counted[0] - before[0] and after[1] - counted[1] == counted[1] - before[1]
    assert emulated_gather.launches - launches == (4 * LAYERS if through_route else 0)  # 3 alone + 1 batch a layer
    _write(pool, [0], [20], 4, seed=5)
    assert pool.gather_batch(0, [1, 0], "prefill") is None  # 20 and 24 tokens
    _write(pool, [1, 2], [20, 20], 2, seed=6)  # 22 tokens each: a partial last block, read whole and cut
    for layer in range(LAYERS):
        alone = [pool.gather_visible(layer, seq_id, "prefill") for seq_id in (1, 2)]
        batch = pool.gather_batch(layer, [1, 2], "prefill")
        assert batch.keys.shape == (2, HEADS, 22, DIM)
        assert mx.array_equal(batch.keys, mx.stack([r.keys for r in alone]))
        assert mx.array_equal(batch.values, mx.stack([r.values for r in alone]))
    pool.check_integrity()


def test_the_route_is_off_with_its_switch_or_without_a_table_kernel(monkeypatch, emulated_gather):
    from pool.kernels import table_gather

    monkeypatch.setenv(table_gather.GATHER_ENV, "0")
    assert table_gather.gather_route("emu") is None
    monkeypatch.delenv(table_gather.GATHER_ENV)
    assert table_gather.gather_route("cpu") is None  # no table kernel on the CPU backend
    assert table_gather.gather_route(None) is None


@pytest.mark.numerics
def test_a_live_run_through_the_table_gather_gives_the_per_run_gathers_logits(tiny_qwen3, tmp_path, monkeypatch):
    """A burst with chunked prefills (history gathered at every chunk after the first) on a pretend backend
    whose table kernel and gather are the emulation: byte-identical logits with the table gather on and off (a
    gather is a copy), and the route did gather."""
    import pool.fused_decision as fd
    import pool.kernels.paged_decode as paged_decode
    import pool.kernels.table_gather as table_gather
    from app.workloads.fused_attention import KernelRoute
    from pool.fused_decision import KernelCaps, register_kernel, unregister_kernel
    from pool.kernels.paged_decode_emulated import EmulatedTableKernel
    from pool.kernels.table_gather_emulated import EmulatedTableGather

    from .helpers import assert_same_logits, burst_toml, run_backend, write_scenario

    routes = []
    original = table_gather.TableGatherRoute.gather_batch  # what a single sequence's gather calls too

    def counting_gather(self, *args):
        routes.append(self)
        return original(self, *args)

    monkeypatch.setattr(table_gather.TableGatherRoute, "gather_batch", counting_gather)
    monkeypatch.setitem(paged_decode.TABLE_KERNELS, "metal", EmulatedTableKernel)
    monkeypatch.setitem(table_gather.GATHER_KERNELS, "metal", EmulatedTableGather)
    monkeypatch.setattr(fd, "detect_backend", lambda: "metal")

    def register():
        register_kernel(KernelCaps(backend="metal", dtypes=frozenset({"float32"}), head_dims=frozenset({16, 32}),
                                   multi_slab=True))
        return ["metal"]

    scenario = write_scenario(tmp_path, burst_toml(n=3, concurrency=3, prompt_tokens="[20, 45]", gen_tokens="[3, 6]"))
    pool = dict(block_size=4, slab_blocks=2, prefill_chunk=8, prefix_cache=False)

    def run():
        try:
            return run_backend(tiny_qwen3, scenario, "slab", kernel_route=KernelRoute(register=register,
                                                                                      backend="metal"), **pool)[2]
        finally:
            unregister_kernel("metal")

    monkeypatch.delenv(table_gather.GATHER_ENV, raising=False)
    through_table = run()
    assert routes, "no history gather went through the table route"
    launched = len(routes)
    monkeypatch.setenv(table_gather.GATHER_ENV, "0")
    per_run = run()
    assert len(routes) == launched  # switched off: the storage's per-run gather
    assert_same_logits(through_table, per_run, "table gather vs per-run gather")


class _StubBuilds:
    """KernelBuilds' status/request/binary as the table kernels use them: a variant compiles until ``done``."""

    def __init__(self):
        self.requested, self.done = [], False

    def status(self, variant):
        return "ready" if self.done else "compiling"

    def request(self, variants, priority):
        self.requested.extend(variants)

    def binary(self, variant):
        assert self.done
        return variant.label, b"cubin"


@pytest.mark.parametrize("kind", ["gather", "write"])
def test_a_cuda_table_kernel_still_building_is_not_ready_and_is_queued(kind):
    """The gather and the write never wait for NVRTC in a step: while their variant builds they say not ready
    (the pool then uses MLX's gather or write) and the variant is queued; once built, they are ready."""
    from types import SimpleNamespace

    from pool.kernels.table_gather_cuda import CudaTableGather
    from pool.kernels.table_write_cuda import CudaTableWrite

    builds = _StubBuilds()
    kernel = (CudaTableGather if kind == "gather" else CudaTableWrite)(builds)
    storage = SimpleNamespace(geometry=SimpleNamespace(dtype="bfloat16", head_dim=128, n_kv_heads=8), block_size=16)
    assert not kernel.ready(storage)
    assert [(v.kind, v.head_dim, v.n_kv, v.block_size) for v in builds.requested] == [(kind, 128, 8, 16)]
    builds.done = True
    assert kernel.ready(storage) and kernel.ready(storage)
