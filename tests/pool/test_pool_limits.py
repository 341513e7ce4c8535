"""Allocation sizes are checked before MLX allocates (a failed huge allocation segfaults): the arithmetic of
pool/limits.py, the pool's first-write and growth checks (state unchanged on refusal), the measured device limits,
and the issue's case (10^6 slab blocks under a 4 GiB address-space limit) in a real process."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap

import pytest

from pool import PagedKVPool, PoolConfig, PoolError
from pool.errors import SizeLimitError
from pool.limits import (INDEX_LIMIT, MemoryLimits, bytes_per_slab, check_first_allocation, check_index_range,
                         check_pool_capacity, elements_per_slab, format_bytes)

from pool_helpers import full_state, make_kv
from pool_writes import write_kv

# make_kv's default geometry: 2 heads x 4 dims float32, block_size 4 -> 128 bytes per tensor row, 256 K+V
ROW = 2 * 4 * 2 * 4 * 4


def test_slab_arithmetic():
    assert elements_per_slab(32, 32, 3, 64) == 32 * 32 * 3 * 64
    assert bytes_per_slab(32, 32, 3, 64, 2) == 2 * 32 * 32 * 3 * 64
    assert format_bytes(1536) == "1.5 KiB" and format_bytes(3 * 2**30) == "3 GiB" and format_bytes(12) == "12 B"


def test_index_range_stops_at_2_pow_32():
    """Literal element counts, not INDEX_LIMIT: a limit moved to 2^31 (or 2^33) must fail here."""
    assert INDEX_LIMIT == 4_294_967_296
    check_index_range(4_294_967_295, "slab")  # 2^32 - 1: the largest index a 32-bit unsigned int holds
    check_index_range(2**31, "slab")  # past a signed 32-bit index: still addressable
    with pytest.raises(SizeLimitError, match="slab: 4,294,967,296 elements; a 32-bit index addresses at most "
                                             "4,294,967,295"):
        check_index_range(2**32, "slab")


def test_capacity_check_names_buffer_and_total():
    limits = MemoryLimits(memory_bytes=10 * ROW, max_buffer_bytes=2 * ROW // 2, source="test device")
    check_pool_capacity("slab", 2, [4, 4], ROW, limits)  # 8 rows of K+V, slabs of 2 rows
    with pytest.raises(SizeLimitError, match=r"need 3 KiB; the device has room for 2\.5 KiB \(test device\)"):
        check_pool_capacity("slab", 2, [6, 6], ROW, limits)
    with pytest.raises(SizeLimitError, match="one 3-row tensor of 384 B exceeds the largest allocation"):
        check_pool_capacity("monolithic", 2, [3, 2], ROW, limits)  # one 3-row tensor
    with pytest.raises(SizeLimitError, match="MLX shapes stop at"):
        check_pool_capacity("monolithic", 32, [2**31], 1, MemoryLimits(2**60, 2**60, "huge"))


def test_first_allocation_of_a_billion_block_slab_is_refused():
    limits = MemoryLimits(24 * 2**30, 24 * 2**30, "system memory 24.0 GiB")
    check_first_allocation(30, "slab", 32, 32, 3, 64, 4, limits)
    with pytest.raises(SizeLimitError, match=r"first slab \(1,000,000,000 blocks x 32 tokens per layer\): one"):
        check_first_allocation(30, "slab", 32, 10**9, 3, 64, 4, limits)
    with pytest.raises(SizeLimitError, match="block_size 1,000,000,000,000 exceeds"):
        check_first_allocation(30, "slab", 10**12, 32, 3, 64, 4, limits)


@pytest.mark.parametrize("design", ["slab", "monolithic"])
def test_first_write_past_the_limit_changes_nothing(design):
    # room for 1.5 slabs of one layer: the first write (2 layers x 1 slab) cannot fit
    limits = MemoryLimits(memory_bytes=3 * ROW, max_buffer_bytes=2**30, source="test device")
    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=4, slab_blocks=2, design=design), limits=limits)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 4)
    before = full_state(pool)
    with pytest.raises(SizeLimitError, match="the KV pool with float32"):
        write_kv(pool, 0, 0, 0, *make_kv(4))
    assert full_state(pool) == before and not pool.storage.initialised and pool.storage.tensors() == []
    pool.check_integrity()


def test_growth_past_the_limit_is_refused_before_the_book_moves():
    limits = MemoryLimits(memory_bytes=2 * 2 * 2 * ROW, max_buffer_bytes=2**30, source="test device")
    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=4, slab_blocks=2), limits=limits)
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 16)  # 4 blocks: 2 slabs per layer, exactly the limit
    for layer in range(2):
        write_kv(pool, layer, 0, 0, *make_kv(16))
    before = full_state(pool)
    with pytest.raises(SizeLimitError, match=r"12 rows \(K \+ V over 2 layers\) need"):
        pool.prepare_write(0, 16, 1)  # a third slab per layer
    assert full_state(pool) == before
    pool.check_integrity()
    pool.trim(0, 12)  # a freed row is reused without growth: still fine
    pool.prepare_write(0, 12, 4)


def test_pool_config_rejects_dimensions_past_int32():
    with pytest.raises(PoolError, match="slab_blocks must be an int in"):
        PagedKVPool(PoolConfig(num_layers=1, slab_blocks=2**31))
    with pytest.raises(PoolError, match="slab_blocks must be an int in"):
        PagedKVPool(PoolConfig(num_layers=1).replace(slab_blocks=10**12))


def test_device_limits_on_this_machine_are_measured():
    from pool.device_limits import device_limits, host_memory

    host = host_memory()
    limits = device_limits()
    assert 0 < limits.memory_bytes <= host.limit_bytes <= host.total_bytes
    assert limits.max_buffer_bytes <= limits.memory_bytes
    assert "MLX memory in use" in limits.source or "ulimit -v" in limits.source


_UNDER_4_GIB = textwrap.dedent("""
    from pool import PagedKVPool, PoolConfig
    from pool.errors import SizeLimitError
    import mlx.core as mx
    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=32, slab_blocks=10**6))
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 8)
    keys = mx.zeros((1, 8, 3, 64))
    try:
        pool.write(0, pool.write_slots([0], [0], 8), keys, keys)
    except SizeLimitError as exc:
        print("refused:", exc)
""")


def test_a_million_block_slab_under_a_4_gib_address_limit_is_an_error_not_a_segfault():
    def limit_address_space():
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))

    result = subprocess.run([sys.executable, "-c", _UNDER_4_GIB], capture_output=True, text=True, timeout=120,
                            preexec_fn=limit_address_space)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused: the KV pool with float32" in result.stdout
    assert "address-space limit (ulimit -v) 4 GiB" in result.stdout
