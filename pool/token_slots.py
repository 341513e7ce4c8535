"""Where a decode step's one new token per sequence lands in every layer, resolved once per step.

A batched decode step writes exactly one token per sequence into each of the model's layers. Asking the
bookkeeping per layer and per sequence (``rows_for_write``) costs 8 x 28 checked lookups per step, repeated for K
and V writes that are otherwise a handful of device ops; resolving all of them once, right after the step's
``prepare_write`` calls, moves that work out of the layer loop. ``TokenSlots`` is plain data (no mlx): per layer,
the physical row of each sequence's target block, plus the token offset inside that block (the same in every
layer). ``layer_versions`` are the layers' row versions at resolution time, so a write through stale slots (rows
changed since: a release, a copy-on-write) is refused instead of landing in someone else's row.
"""

from __future__ import annotations

from dataclasses import dataclass

from pool.errors import PoolError


@dataclass(frozen=True)
class TokenSlots:
    """Targets of one token per sequence: ``layer_rows[layer][i]`` is the row of ``seq_ids[i]``'s block holding
    position ``positions[i]``; ``offsets[i]`` is that position's token index in the block."""

    seq_ids: tuple[int, ...]
    positions: tuple[int, ...]
    offsets: tuple[int, ...]
    layer_rows: tuple[tuple[int, ...], ...]
    layer_versions: tuple[int, ...]


def resolve_token_slots(book, seq_ids, positions) -> TokenSlots:
    """Check every (sequence, position) is prepared and exclusively owned in every layer (what ``rows_for_write``
    checks) and return the rows. Reads ``book`` only; PoolError names the first problem."""
    seq_ids, positions = tuple(seq_ids), tuple(int(p) for p in positions)
    if not seq_ids or len(seq_ids) != len(positions):
        raise PoolError("token slots need one position per sequence (and at least one sequence)")
    if len(set(seq_ids)) != len(seq_ids):
        raise PoolError(f"token slots: a sequence appears twice in {list(seq_ids)}")
    bs = book.block_size
    all_tables = [book.tables(seq_id) for seq_id in seq_ids]
    for seq_id, tables, pos in zip(seq_ids, all_tables, positions):
        if pos < 0 or pos >= tables[0].length:
            raise PoolError(f"sequence {seq_id}: position {pos} is not prepared (length {tables[0].length}); "
                            "call prepare_write first")
    indices = [pos // bs for pos in positions]
    layer_rows = []
    for layer in range(book.num_layers):
        # a list comprehension, not a generator: this runs for every layer of every decode step
        rows = tuple([tables[layer].rows[index] for tables, index in zip(all_tables, indices)])
        counts = book.layers[layer].row_refcount
        shared = [seq_id for seq_id, row in zip(seq_ids, rows) if counts[row] != 1]
        if shared:
            raise PoolError(f"layer {layer}: the target blocks of sequences {shared} are shared; prepare_write "
                            "copies them on write and must come first")
        layer_rows.append(rows)
    return TokenSlots(seq_ids, positions, tuple(pos % bs for pos in positions), tuple(layer_rows),
                      tuple(book.versions))


def check_current(book, slots: TokenSlots, layer: int) -> None:
    """PoolError when ``layer``'s rows changed since ``slots`` were resolved."""
    if book.versions[layer] != slots.layer_versions[layer]:
        raise PoolError(f"layer {layer}: token slots are stale (rows changed since they were resolved)")
