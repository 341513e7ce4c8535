"""Do two layers hold the same block tables for a set of sequences? (plain Python, no mlx)

A decode step's fused launches share one plan among the layers whose tables match (``app/workloads/step_plans.py``),
so every layer of every step asks this: comparing each sequence's row list element by element cost ~11 us per layer
on an H200 host (8 sequences of 129 blocks), 0.3 ms per step of a 28-layer model. Rows change only through the
bookkeeping's row operations, and every one of them bumps the layer's row version (``RowBook.versions``: block
created, reference added or dropped, row moved by a shrink, row owners changed). So a pair of layers found equal
stays equal while neither version moves: the answer is memoised under both versions and the sequence ids, and only
the lengths and logical starts (which move every step without a row change) are compared on every call.
"""

from __future__ import annotations

from typing import Sequence


class TableMatch:
    """Owns the memo of (layer, reference layer) pairs whose rows were compared equal, with the versions and
    sequences they were compared at. Reads the book; never mutates it."""

    def __init__(self, book) -> None:
        self.book = book
        self._equal_rows: dict[tuple[int, int], tuple] = {}  # (layer, ref) -> (seq_ids, version, ref version)
        self._matching: tuple | None = None  # ((seq_ids, ref, every layer's version), layers with ref's rows)
        self.compared = 0  # full row comparisons made (the memo's misses), for tests and benchmarks

    def same(self, layer: int, ref: int, seq_ids: Sequence[int]) -> bool:
        """True when every sequence's table in ``layer`` equals its table in ``ref``: rows, length, logical start.
        PoolError for an unknown sequence or layer."""
        book = self.book
        book.check_layer(layer)
        book.check_layer(ref)
        all_tables = [book.tables(seq_id) for seq_id in seq_ids]
        for tables in all_tables:
            mine, theirs = tables[layer], tables[ref]
            if mine.length != theirs.length or mine.logical_start != theirs.logical_start:
                return False
        stamp = (tuple(seq_ids), book.versions[layer], book.versions[ref])
        if self._equal_rows.get((layer, ref)) == stamp:
            return True
        self.compared += 1
        if all(tables[layer].rows == tables[ref].rows for tables in all_tables):
            self._equal_rows[layer, ref] = stamp
            return True
        return False

    def matching(self, ref: int, seq_ids: Sequence[int]) -> frozenset[int]:
        """Every layer whose tables for ``seq_ids`` equal ``ref``'s (rows, lengths, logical starts), ``ref``
        included: what a step's plan asks once instead of ``same`` per layer. The rows part is memoised under all
        layers' row versions (one tuple comparison per step while no row changes); lengths and starts are compared
        on every call. PoolError for an unknown sequence or layer."""
        book = self.book
        book.check_layer(ref)
        seq_ids = tuple(seq_ids)
        all_tables = [book.tables(seq_id) for seq_id in seq_ids]
        stamp = (seq_ids, ref, tuple(book.versions))
        if self._matching is not None and self._matching[0] == stamp:
            same_rows = self._matching[1]
        else:
            self.compared += 1
            same_rows = frozenset(layer for layer in range(book.num_layers)
                                  if all(tables[layer].rows == tables[ref].rows for tables in all_tables))
            self._matching = (stamp, same_rows)
        spans = [(tables[ref].length, tables[ref].logical_start) for tables in all_tables]
        return frozenset(layer for layer in same_rows
                         if all((tables[layer].length, tables[layer].logical_start) == span
                                for tables, span in zip(all_tables, spans)))
