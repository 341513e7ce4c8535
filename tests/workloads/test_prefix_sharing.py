"""Prefix sharing: the plain-Python PrefixCache on a real (storage-free) pool, and adopted-prefix parity.

The white-box tests drive the pool's bookkeeping only (prepare_write without writes allocates no storage), so
they assert exact block ids and refcounts without touching mlx.
"""

import subprocess
import sys

import pytest

from pool import PagedKVPool, PoolConfig
from pool.prefix_cache import PrefixCache, chain_hashes

from .helpers import assert_same_logits, run_backend, write_scenario

BS = 4


def _pool_with(seq_id, tokens, pool=None, cache=None):
    pool = pool or PagedKVPool(PoolConfig(num_layers=2, block_size=BS, slab_blocks=2))
    cache = cache or PrefixCache(pool, BS)
    cache.attach(seq_id, tokens, max_tokens=len(tokens) - 1)
    start = pool.step_view([seq_id]).lengths[0]
    pool.prepare_write(seq_id, start, len(tokens) - start)
    return pool, cache


def test_chain_hashes_cover_full_blocks_only_and_chain():
    a = chain_hashes(list(range(10)), BS)
    b = chain_hashes([0, 1, 2, 3, 9, 9, 9, 9], BS)
    assert len(a) == 2 and a[0] == b[0] and a[1] != b[1]
    assert chain_hashes([1, 2, 3], BS) == []


def test_insert_then_attach_shares_blocks_by_refcount():
    tokens = list(range(100, 110))  # 2 full blocks + 2 tokens
    pool, cache = _pool_with(0, tokens)
    donor_blocks = list(pool.book.table(0).block_ids)
    assert cache.insert(0, tokens) == 2
    pool.release(0)
    assert pool.stats().live_blocks == 2 * 2  # 2 kept blocks x 2 layers, pinned by the handle
    shared = cache.attach(1, tokens[:8] + [7, 7, 7], max_tokens=10)
    assert shared == 8 and pool.step_view([1]).lengths[0] == 8
    assert list(pool.book.table(1).block_ids) == donor_blocks[:2]
    assert cache.counters()["cached_tokens"] == 8 and cache.counters()["shared_blocks"] == 2
    pool.check_integrity()
    cache.check_integrity()


def test_partial_match_trims_to_the_matched_blocks():
    tokens = list(range(12))
    pool, cache = _pool_with(0, tokens)
    cache.insert(0, tokens)  # 3 blocks
    pool.release(0)
    other = tokens[:4] + [99] * 8  # only block 0 matches
    assert cache.attach(1, other, max_tokens=11) == 4
    assert pool.step_view([1]).lengths[0] == 4
    pool.prepare_write(1, 4, 8)  # the divergent tail goes to new blocks, the shared one stays shared
    pool.check_integrity()


def test_match_never_covers_the_last_prompt_token():
    tokens = list(range(8))  # exactly 2 blocks
    pool, cache = _pool_with(0, tokens + [50])
    cache.insert(0, tokens)
    pool.release(0)
    # the same 8-token prompt: its last token must be computed (it yields the first logits) -> only 1 block
    assert cache.attach(1, tokens, max_tokens=7) == 4


def test_token_mismatch_behind_a_hash_hit_is_not_shared():
    tokens = list(range(8))
    pool, cache = _pool_with(0, tokens + [1])
    cache.insert(0, tokens)
    pool.release(0)
    h0 = chain_hashes(tokens, BS)[0]
    entry = cache._index[h0]
    cache._index[h0] = type(entry)(entry.keeper_id, entry.depth, entry.parent_hash, (9, 9, 9, 9))  # "collision"
    assert cache.match(tokens) == (0, None)


def test_longer_insert_replaces_redundant_handle_and_clear_frees_everything():
    tokens = list(range(16))
    pool, cache = _pool_with(0, tokens[:5])
    cache.insert(0, tokens[:4])
    pool.release(0)
    pool, cache = _pool_with(1, tokens, pool, cache)
    cache.insert(1, tokens)
    assert cache.num_handles == 1 and cache.num_cached_blocks == 4
    pool.release(1)
    cache.check_integrity()
    cache.clear()
    assert pool.stats().live_blocks == 0 and cache.num_handles == 0
    pool.check_integrity()


def test_max_cached_blocks_evicts_least_recently_used():
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=BS, slab_blocks=2))
    cache = PrefixCache(pool, BS, max_cached_blocks=2)
    for seq, base in enumerate((0, 100, 200)):
        tokens = list(range(base, base + 9))
        _pool_with(seq, tokens, pool, cache)
        cache.insert(seq, tokens[:8])
        pool.release(seq)
    assert cache.num_handles == 1 and cache.evicted_handles == 2
    assert cache.match(list(range(200, 208)))[0] == 2 and cache.match(list(range(8)))[0] == 0
    cache.check_integrity()


def test_attach_aligns_the_shared_length():
    tokens = list(range(20))
    pool, cache = _pool_with(0, tokens)
    cache.insert(0, tokens)  # 5 blocks
    pool.release(0)
    assert cache.attach(1, tokens, max_tokens=19, align_tokens=8) == 16
    assert cache.attach(2, tokens, max_tokens=19, align_tokens=64) == 0 and pool.step_view([2]).lengths[0] == 0
    pool.check_integrity()


def test_prefix_cache_module_imports_no_mlx():
    code = "import sys, pool.prefix_cache; sys.exit('mlx' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=".").returncode == 0


SHARED = """
[params]
n = 3
[pool]
prefix_cache = true
[[phases]]
name = "seq"
kind = "requests"
count = "$n"
concurrency = 1
shared_prefix = 43
prompt_tokens = [5, 20]
gen_tokens = [3, 6]
"""


@pytest.mark.numerics
@pytest.mark.parametrize("backend", ["slab", "monolithic"])
def test_adopted_prefix_gives_the_same_bytes_as_a_cold_run(backend, tiny_qwen3, tmp_path):
    """Requests 2 and 3 find request 1's 5 cached blocks (40 tokens) and resume at the chunk boundary 32: same
    chunks as a cold run, so the same bytes. (Resuming at 40 changes a chunk's matmul shape: measured 1e-6 off.)"""
    scenario = write_scenario(tmp_path, SHARED)
    fields = dict(block_size=8, slab_blocks=2, prefill_chunk=16)
    warm, _, warm_logits = run_backend(tiny_qwen3, scenario, backend, **fields)
    cold, _, cold_logits = run_backend(tiny_qwen3, scenario, backend, prefix_cache=False, **fields)
    _, _, dense_logits = run_backend(tiny_qwen3, scenario, "dense", **fields)
    assert warm["prefix_cache"]["hits"] == 2 and warm["prefix_cache"]["cached_tokens"] == 64
    assert warm["prefill_tokens"] == cold["prefill_tokens"] - 64
    assert_same_logits(warm_logits, cold_logits, "adopted vs cold")
    assert_same_logits(warm_logits, dense_logits, "adopted vs dense")


def test_random_workloads_only_ever_share_blocks_holding_the_same_tokens():
    """Property test: prompts over a 2-letter alphabet (many common prefixes); every block handed out by the
    cache must hold exactly the tokens the adopting prompt has there; integrity holds after every operation."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    prompts = st.lists(st.lists(st.integers(0, 1), min_size=1, max_size=14), min_size=1, max_size=12)

    @settings(max_examples=60, deadline=None)
    @given(prompts, st.integers(0, 3))
    def run(prompt_list, evict_every):
        pool = PagedKVPool(PoolConfig(num_layers=2, block_size=BS, slab_blocks=2))
        cache = PrefixCache(pool, BS)
        content: dict[int, tuple] = {}  # layer-0 block id -> tokens it holds
        for seq_id, tokens in enumerate(prompt_list):
            shared = cache.attach(seq_id, tokens, max_tokens=len(tokens) - 1)
            blocks = list(pool.book.table(seq_id).block_ids)
            for j in range(shared // BS):
                assert content[blocks[j]] == tuple(tokens[j * BS:(j + 1) * BS])
            pool.prepare_write(seq_id, shared, len(tokens) - shared)
            for j, block in enumerate(list(pool.book.table(seq_id).block_ids)[shared // BS:], start=shared // BS):
                content[block] = tuple(tokens[j * BS:(j + 1) * BS])
            cache.insert(seq_id, tokens)
            pool.release(seq_id)
            if evict_every and seq_id % evict_every == 0:
                cache.evict(1)
            pool.check_integrity()
            cache.check_integrity()
        cache.clear()
        assert pool.stats().live_blocks == 0

    run()
