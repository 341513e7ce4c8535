"""Copies measured from MLX's allocator (pool/copy_meter.py) beside the bookkeeping's model, and the live byte
counters the memory sampler reads (PoolBytes), against recounts and against storages that misbehave."""

from __future__ import annotations

import mlx.core as mx
import pytest

from pool import MONOLITHIC_CHUNK_BLOCKS, PagedKVPool, PoolConfig, PoolError
from pool.copy_meter import CopyWindow, peak_memory
from pool.pool import ALLOCATOR_NOISE_BYTES

from pool_helpers import make_kv, recopying_slab_storage_class, use_storage
from pool_writes import write_kv

BYTES_PER_ROW = 2 * 4 * 2 * 4 * 4  # K+V x block 4 x 2 heads x head_dim 4 x fp32


def churn(pool):
    """Prefills across slab/chunk boundaries, a clone written into (copy-on-write), a release; returns the pool
    after checking its integrity at every step."""
    for seq, tokens in enumerate((30, 70, 40)):
        pool.add_sequence(seq)
        keys, values = make_kv(tokens, seed=seq)
        pool.prepare_write(seq, 0, tokens)
        for layer in range(pool.config.num_layers):
            write_kv(pool, layer, seq, 0, keys, values)
        pool.check_integrity()
    pool.clone(1, 5, 66)
    pool.prepare_write(5, 66, 1)  # the shared partial block is copied (one pair per layer)
    pool.check_integrity()
    pool.release(0)
    pool.check_integrity()
    return pool


@pytest.mark.parametrize("design", ["slab", "monolithic"])
def test_measured_copies_equal_the_model_when_storage_behaves(design):
    pool = churn(PagedKVPool(PoolConfig(num_layers=2, block_size=4, slab_blocks=2, design=design)))
    c = pool.counters()
    assert c.cow_copies == 2 and c.cow_bytes_copied == c.cow_bytes_copied_model == 2 * BYTES_PER_ROW
    if design == "slab":
        assert c.bytes_copied == c.bytes_copied_model == 0 and c.slab_appends > 0
    else:  # 8 + 18 rows fit the first 32-row chunk; 10 more grow it to 64, copying 32 rows per layer
        assert c.bytes_copied_model == 2 * 32 * BYTES_PER_ROW == c.bytes_copied


@pytest.mark.parametrize("slab_blocks, tolerated", [(2, ALLOCATOR_NOISE_BYTES), (16, 16 * BYTES_PER_ROW // 2 - 1)])
def test_the_growth_check_tolerates_allocator_transients_below_one_slab_tensor_and_not_more(slab_blocks, tolerated):
    """A re-copy copies at least one whole slab tensor; the allocator's own transients (16 and 64 bytes measured on
    the CPU, pool/pool.py) stay below ALLOCATOR_NOISE_BYTES. Slabs of 2 rows (one K tensor: 256 bytes): the noise
    floor is the tolerance; of 16 rows (2 KiB): one tensor less a byte. 1% of the slabs is far less either way."""
    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=4, slab_blocks=slab_blocks))
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 16)
    for layer in range(2):
        write_kv(pool, layer, 0, 0, *make_kv(16, seed=1))
    pool.storage.bytes_copied = tolerated
    pool.check_integrity()
    pool.storage.bytes_copied = tolerated + 1
    with pytest.raises(PoolError, match="slab growth copies nothing"):
        pool.check_integrity()


def test_a_slab_storage_that_recopies_on_growth_is_measured_and_caught(monkeypatch):
    use_storage(monkeypatch, recopying_slab_storage_class())
    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=4, slab_blocks=2))
    pool.add_sequence(0)
    keys, values = make_kv(16, seed=1)
    pool.prepare_write(0, 0, 16)  # 4 rows = 2 slabs per layer, nothing existing to copy
    for layer in range(2):
        write_kv(pool, layer, 0, 0, keys, values)
    assert pool.counters().bytes_copied == 0
    pool.prepare_write(0, 16, 9)  # 3 more rows: 2 more slabs per layer, each layer's 2 old slabs re-copied
    slab_bytes = 2 * BYTES_PER_ROW  # K+V of a 2-row slab
    assert pool.counters().bytes_copied_model == 0
    assert pool.counters().bytes_copied == 2 * 2 * slab_bytes
    with pytest.raises(PoolError, match="slab growth copies nothing"):
        pool.check_integrity()
    for layer in range(2):  # the data is intact: only the allocator could see the copies
        write_kv(pool, layer, 0, 16, *make_kv(9, seed=2))
        assert mx.array_equal(pool.gather_visible(layer, 0).keys[:, :16], keys.transpose(1, 0, 2))


def test_each_lazy_replacement_is_measured_not_only_the_largest():
    """Four lazy copies that each free their source, evaluated together, peak at one copy; measured one at a time
    they sum to four."""
    slabs = [mx.zeros((8, 64)) for _ in range(4)]
    mx.eval(slabs)
    window = CopyWindow(lambda: [slabs])
    slabs[:] = [mx.concatenate([s, s[:0]]) for s in slabs]
    assert window.checkpoint() == 4 * 8 * 64 * 4 and window.copied == 4 * 8 * 64 * 4


def test_replacements_of_different_sizes_in_k_and_v_lists_are_each_measured():
    """The case the checkpoint's rule is for, as a storage meets it: a lazy rewrite replaces tensors of different
    sizes in a layer's K list and V list, each copy freeing its source, beside an appended tensor (new capacity,
    not charged). Evaluated together the peak would show about the largest copy; one tensor measured and
    multiplied, or one list measured, would miss others. Measured one at a time they sum to every copy's bytes."""
    row = 64 * 4
    keys = [mx.zeros((8, 64)), mx.zeros((16, 64))]
    values = [mx.zeros((4, 64)), mx.zeros((32, 64))]
    fill = mx.ones((1, 64))
    mx.eval(keys, values, fill)
    window = CopyWindow(lambda: [keys, values])
    keys[1] = mx.concatenate([keys[1], keys[1][:0]])
    values[0] = mx.concatenate([values[0], values[0][:0]])
    values[1] = mx.concatenate([values[1], values[1][:0]])
    keys.append(mx.full((8, 64), fill[0, 0]))  # grown capacity (filled from an evaluated array: no transient)
    assert window.checkpoint() == (16 + 4 + 32) * row
    keys[0] = mx.concatenate([keys[0], keys[0][:0]])  # the next checkpoint charges only what changed since
    assert window.checkpoint() == 8 * row and window.copied == (16 + 4 + 32 + 8) * row


def test_growth_in_place_or_by_appending_charges_nothing():
    tensors = [mx.zeros((8, 64))]
    update = mx.ones((2, 64))
    mx.eval(tensors, update)
    window = CopyWindow(lambda: [tensors])
    tensors.append(mx.full((8, 64), update[0, 0]))  # new capacity
    tensors[0][2:4] = update  # an in-place write: MLX donates the buffer
    assert window.checkpoint() == 0


def test_peak_memory_survives_the_windows_resets():
    big = mx.zeros((1024, 1024))  # 4 MiB
    mx.eval(big)
    high = mx.get_active_memory()
    del big
    pool = PagedKVPool(PoolConfig(num_layers=1, block_size=2, slab_blocks=2))
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 4)
    write_kv(pool, 0, 0, 0, *make_kv(4))  # a measured growth: resets MLX's own counter
    assert mx.get_peak_memory() < high <= peak_memory()


def test_storage_capacity_that_disagrees_with_the_book_is_an_integrity_error():
    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=4, slab_blocks=2))
    pool.add_sequence(0)
    pool.prepare_write(0, 0, 8)
    for layer in range(2):
        write_kv(pool, layer, 0, 0, *make_kv(8))
    pool.check_integrity()
    pool.storage.ensure_rows(1, 4)  # a slab behind the bookkeeping's back, in one layer
    with pytest.raises(PoolError, match=r"every layer's storage holds the booked capacity: layers hold \[2, 4\] rows, "
                                        "the bookkeeping reserved 2"):
        pool.check_integrity()


@pytest.mark.parametrize("design", ["slab", "monolithic"])
def test_byte_counters_follow_every_operation(design):
    """The figures the sampler reads (``bytes_now``) equal a recount after every pool operation, including the first
    write (every layer's bytes start counting there, at once). (Inside an operation they may lead storage by that
    operation: the book reserves capacity before storage allocates it.)"""
    pool = PagedKVPool(PoolConfig(num_layers=2, block_size=4, slab_blocks=2, design=design))
    seen = []

    def check():
        stats, now = pool.stats(), pool.bytes_now()
        assert (now.live, now.reserved) == (stats.bytes_in_use, stats.bytes_reserved)
        chunk = 2 if design == "slab" else MONOLITHIC_CHUNK_BLOCKS  # rows per slab / grow chunk
        assert now.slabs == sum(pool.storage.layer_capacity(layer) // chunk for layer in range(2))
        seen.append(now.live)

    keys, values = make_kv(13, seed=3)
    for operation in (lambda: pool.add_sequence(0), lambda: pool.prepare_write(0, 0, 13),
                      lambda: write_kv(pool, 0, 0, 0, keys, values),  # the first write: both layers counted
                      lambda: write_kv(pool, 1, 0, 0, keys, values), lambda: pool.clone(0, 1, 13),
                      lambda: pool.prepare_write(1, 13, 4),  # copy-on-write of block 3, a new block 4
                      lambda: pool.release(0)):
        operation()
        check()
    assert seen[1] == 0 and seen[2] == seen[3] == 2 * 4 * BYTES_PER_ROW
    assert max(seen) == 2 * 6 * BYTES_PER_ROW  # both sequences' rows after the copy-on-write
    pool.release(1)
    check()
    assert pool.bytes_now().live == 0 and pool.bytes_now().reserved == pool.stats().bytes_reserved > 0
    pool.storage.ensure_rows(0, 2 * pool.storage.capacity_rows())  # storage past what was booked
    with pytest.raises(PoolError, match="storage holds the booked capacity"):
        pool.check_integrity()


def test_allocated_during_charges_results_and_transients_of_the_work():
    from pool.copy_meter import allocated_during

    a = mx.ones((64, 64))  # 16 KiB
    index = mx.arange(64)
    mx.eval(a, index)
    (joined,), allocated = allocated_during(lambda: [mx.concatenate([a, a])], [a])
    assert allocated == joined.nbytes == 2 * 64 * 64 * 4
    # a staged take (16 KiB, freed once the result exists) plus the result (32 KiB)
    (joined,), allocated = allocated_during(lambda: [mx.concatenate([mx.take(a, index, axis=0)] * 2)], [a])
    assert allocated == 3 * 64 * 64 * 4 and joined.nbytes == 2 * 64 * 64 * 4


def test_reset_peak_memory_starts_the_corrected_peak_from_zero():
    from pool.copy_meter import reset_peak_memory

    mx.eval(mx.ones((256, 256)))
    reset_peak_memory()
    assert peak_memory() == mx.get_peak_memory() == 0


def test_a_result_served_from_a_larger_cached_buffer_is_charged_its_own_bytes():
    from pool.copy_meter import allocated_during

    half = mx.ones((32, 64))
    mx.eval(half)
    spare = mx.ones((64 * 64 + 1024,))  # 20 KiB, freed into MLX's cache: the 16 KiB result will reuse it
    mx.eval(spare)
    del spare
    before = mx.get_active_memory()
    (joined,), allocated = allocated_during(lambda: [mx.concatenate([half, half])], [half])
    assert mx.get_active_memory() - before == 64 * 64 * 4 + 1024 * 4  # the allocator holds 20 KiB for it
    assert allocated == joined.nbytes == 64 * 64 * 4


def test_memory_freed_inside_a_window_is_not_mistaken_for_a_copy():
    """An unrelated 64 KiB buffer freed during a growth that stages a 16 KiB transient: the charge is capped at
    peak - before - growth (0 here), since the transient may have reused the freed memory."""
    a = mx.ones((64, 64))
    unrelated = mx.ones((4 * 64, 64))
    index = mx.arange(64)
    mx.eval(a, unrelated, index)
    tensors = [a]
    window = CopyWindow(lambda: [tensors])
    del unrelated
    tensors.append(mx.concatenate([mx.take(a, index, axis=0)] * 2))  # 32 KiB of new capacity, staged through a take
    assert window.checkpoint() == 0
