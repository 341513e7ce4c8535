"""Compaction in an ``open_blocks="high"`` book: the rows a burst's prefill parked (pool/free_rows.py) are free rows
like any other to a shrink, in its plan and in its execution alike. The plan picked destinations among all free
rows, lowest first, while the execution took the lowest *unparked* row, so a parked row below the first unparked
one made every such shrink "out of date" (``whatif --shrink compact`` on a fresh CPU slab recording: the slab backend
with shrink off parks, tests/probes/test_whatif_fresh_recording.py)."""

from __future__ import annotations

from pool import BlockBook, ShrinkPolicy
from pool.ops import BlockMove

BS, SLAB, ROW_BYTES = 4, 4, 64


def parked_burst() -> BlockBook:
    """Four sequences admitted together (reserved for 20 tokens each), prefilled to 15 tokens in chunks of 8: full
    blocks at rows 0-2, 4-6, 8-10, 12-14, their open blocks at the top (rows 23, 22, 21, 20), and the rows the open
    blocks would have taken (3, 7, 11, 15) parked."""
    book = BlockBook(1, BS, "slab", SLAB, None, shrink=ShrinkPolicy("compact", 1 << 30, 0.5), open_blocks="high")
    book.set_geometry("float32", 1, 8, ROW_BYTES)
    for seq in range(4):
        book.add_sequence(seq)
    book.reserve({seq: 20 for seq in range(4)})
    for seq in range(4):
        for start in range(0, 15, 8):
            book.prepare_write(seq, start, min(8, 15 - start))
    return book


def test_compaction_moves_blocks_into_parked_rows_it_planned():
    book = parked_burst()
    assert book.free.parked_rows() == [3, 7, 11, 15]
    ops = []
    book.add_op_listener(ops.append)
    book.release(1)  # rows 4-6 and 22 free (unparked): the top slab keeps rows 23 and 20, half of it
    book.release(2)  # rows 8-10 and 21
    plan = book.shrink()
    assert plan.moves == [(20, 3), (23, 4)]  # the lowest free rows, the parked row 3 first
    assert book.block_rows(0) == [0, 1, 2, 4] and book.block_rows(3) == [12, 13, 14, 3]
    assert [op for op in ops if isinstance(op, BlockMove)] == [BlockMove(layers=1, moves=[(20, 3), (23, 4)],
                                                                         count=2, bytes=2 * ROW_BYTES)]
    assert book.capacity == 4 * SLAB and 3 not in book.free.parked_rows()
    book.check_integrity()


def test_a_replay_of_the_compacting_op_log_reproduces_it():
    from pool import apply_op
    from pool.book_state import BookState  # noqa: F401 - the state round trip below uses it

    book = parked_burst()
    start = book.state()
    ops = []
    book.add_op_listener(ops.append)
    book.release(1)
    book.release(2)
    book.shrink()
    replay = BlockBook.from_state(start, check=True)
    handles: dict = {}
    for op in ops:
        apply_op(replay, op, handles)
    assert replay.state() == book.state()
    replay.check_integrity()
