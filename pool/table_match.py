"""Which layers hold the same block tables as a reference layer, for a set of sequences? (plain Python, no mlx)

A decode step's fused launches share one plan among the layers whose tables match (``app/workloads/step_plans.py``
asks once per plan per step). Comparing each sequence's row list element by element in every layer cost ~11 us per
layer on an H200 host (8 sequences of 129 blocks), 0.3 ms per step of a 28-layer model. Rows change only through
the bookkeeping's row operations, and every one of them bumps the layer's row version (``RowBook.versions``: block
created, reference added or dropped, row moved by a shrink, row owners changed). So the layers found equal stay
equal while no version moves: the rows part is memoised under every layer's version and the sequence ids, and only
the lengths and logical starts (which move every step without a row change) are compared on every call.
"""

from __future__ import annotations

from typing import Sequence


class TableMatch:
    """Owns the memo of the last ``matching`` answer's rows part: the sequences, reference layer and every layer's
    row version it was computed at. Reads the book; never mutates it."""

    def __init__(self, book) -> None:
        self.book = book
        self._matching: tuple | None = None  # ((seq_ids, ref, every layer's version), layers with ref's rows)
        self.compared = 0  # full row comparisons made (the memo's misses), for tests and benchmarks

    def matching(self, ref: int, seq_ids: Sequence[int]) -> frozenset[int]:
        """Every layer whose tables for ``seq_ids`` equal ``ref``'s (rows, lengths, logical starts), ``ref``
        included. The rows part is memoised under all layers' row versions (one tuple comparison per step while no
        row changes); lengths and starts are compared on every call. PoolError for an unknown sequence or layer."""
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
