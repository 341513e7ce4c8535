"""Write helpers for tests across the suite (tests/ is on sys.path): the one-sequence and per-step writes the tests
have always made, expressed through the pool's one write path (``write_slots`` resolved once, ``write`` per layer)."""

from __future__ import annotations


def write_kv(pool, layer: int, seq_id: int, start: int, keys, values) -> None:
    """Store one sequence's ``keys``/``values`` ([num_tokens, H, D]) at ``[start, start + num_tokens)`` of
    ``layer`` (prepared by ``prepare_write``)."""
    slots = pool.write_slots([seq_id], [start], int(keys.shape[0]))
    pool.write(layer, slots, keys[None], values[None])


def write_batch_kv(pool, layer: int, seq_ids, starts, keys, values) -> None:
    """Store ``keys``/``values`` ([B, num_tokens, H, D]) for ``seq_ids`` from ``starts`` in ``layer``."""
    pool.write(layer, pool.write_slots(list(seq_ids), list(starts), int(keys.shape[1])), keys, values)


def write_tokens_kv(pool, layer: int, slots, keys, values) -> None:
    """Store one token per sequence of ``slots`` (``write_slots(..., 1)``): ``keys``/``values`` [B, H, D]."""
    pool.write(layer, slots, keys[:, None], values[:, None])


def write_layers(pool, seq_id: int, start: int, keys, values) -> None:
    """``prepare_write`` then the same K/V ([num_tokens, H, D]) into every layer."""
    pool.prepare_write(seq_id, start, int(keys.shape[0]))
    slots = pool.write_slots([seq_id], [start], int(keys.shape[0]))
    for layer in range(pool.config.num_layers):
        pool.write(layer, slots, keys[None], values[None])
