"""The pool's op log entries: one frozen, typed record per topology-changing operation (plain data, no mlx).

``BlockBook`` emits them to its op listeners (``PagedKVPool.add_op_listener``); ``pool.op_apply.apply_op``
re-executes the sequence-level ones on another book (replays, what-if). Each op is a ``msgspec`` Struct tagged by
its ``"op"`` name, so an op log encodes to and decodes from bytes with one typed (validated) decoder and code
matches on the type, never on a string.

Two families:

* **Sequence level** (``SequenceOp``): what a caller asked for. Re-executing them in order on a fresh book with the
  same geometry reproduces the pool's bookkeeping exactly.
* **Derived** (``DerivedOp``): consequences the book computed (rows minted, copy-on-write, growth, rows freed,
  the storage geometry) or storage measured (``copied``: the bytes the allocator saw a growth or copy-on-write
  copy). Recorded for the UI and for checking replays; a replaying book recomputes the computed ones, and a
  rebuild adds the measured ones to the keyframe's measured counters.

Adding an op: subclass ``SequenceOp`` or ``DerivedOp`` with a new tag (the tag is the name in the op log), emit it
from the book, and handle it in ``apply_op`` (sequence-level ops only). ``OP_TYPES`` finds it by itself.
"""

from __future__ import annotations

from typing import Union

import msgspec


class Op(msgspec.Struct, frozen=True, tag_field="op"):
    """Base of every op; ``op.name`` is its tag (the name in the op log)."""

    @property
    def name(self) -> str:
        return type(self).__struct_config__.tag


class SequenceOp(Op, frozen=True):
    """An operation a caller asked for (re-executed by replays)."""


class DerivedOp(Op, frozen=True):
    """A consequence the book computed (skipped by replays, which recompute it)."""


# ---- sequence level ------------------------------------------------------------------------------------------
class AddSequence(SequenceOp, tag="add_sequence"):
    seq: int


class PrepareWrite(SequenceOp, tag="prepare_write"):
    seq: int
    start: int
    num_tokens: int


class Release(SequenceOp, tag="release"):
    seq: int


class Clone(SequenceOp, tag="clone"):
    src: int
    dst: int
    num_tokens: int


class Detach(SequenceOp, tag="detach"):
    seq: int
    handle: int


class Adopt(SequenceOp, tag="adopt"):
    handle: int
    seq: int


class ReleaseHandle(SequenceOp, tag="release_handle"):
    handle: int


class Trim(SequenceOp, tag="trim"):
    seq: int
    num_tokens: int


class SetSlabBlocks(SequenceOp, tag="set_slab_blocks"):
    slab_blocks: int


class SetLogicalStart(SequenceOp, tag="set_logical_start"):
    seq: int
    logical_start: int


class Reserve(SequenceOp, tag="reserve"):
    """Hold capacity for sequences ``seqs`` to reach ``lengths`` tokens (their blocks still to come) in one growth,
    so the writes that fill them grow nothing (``BlockBook.reserve``)."""

    seqs: list[int]
    lengths: list[int]


class ShrinkTick(SequenceOp, tag="shrink"):
    """A shrink point (one per workload step, and per idle tick): the book ran its shrink policy here
    (pool/shrink_types.py). Logged whatever the policy, ``off`` included, so a what-if replay can run another
    policy at the same points."""


# ---- derived -------------------------------------------------------------------------------------------------
class RowMint(DerivedOp, tag="row_mint"):
    """Rows given to new or copied blocks by one prepare_write: ``rows`` in layer 0, totals over layers."""

    layer_count: int
    rows: list[int]
    minted: int
    reused: int


class CopyOnWrite(DerivedOp, tag="cow"):
    """Logical block ``logical_block`` of ``seq`` was copied before a write (in ``num_layers`` layers)."""

    seq: int
    logical_block: int
    num_layers: int


class SlabAppend(DerivedOp, tag="slab_append"):
    """``count`` slabs over ``layers`` layers; ``bytes`` 0 before storage_init fixed the row size."""

    layers: int
    count: int
    bytes: int


class Grow(DerivedOp, tag="grow"):
    """Monolithic grow-by-copy of ``layers`` layers from ``old_rows`` to ``new_rows`` (modelled bytes)."""

    layers: int
    old_rows: int
    new_rows: int
    bytes_copied: int


class RowsFreed(DerivedOp, tag="rows_freed"):
    """Rows back on the free lists: ``rows`` in layer 0, ``count`` over every layer."""

    rows: list[int]
    count: int


class StorageInit(DerivedOp, tag="storage_init"):
    """The first write fixed the row geometry (byte figures use ``bytes_per_row``, K+V)."""

    dtype: str
    n_kv_heads: int
    head_dim: int
    bytes_per_row: int


class Copied(DerivedOp, tag="copied", omit_defaults=True):
    """What storage *measured* one operation copying (pool/copy_meter.py): ``bytes`` by growth, ``cow_bytes`` by
    copy-on-write, ``moved_bytes`` by a shrink's block moves (and a monolithic shrink's allocate-smaller-and-copy).
    A replay has no storage to measure: it adds these to rebuild the measured counters exactly. A field at its
    default is left out of the log (the op's wire shape from before shrink existed)."""

    bytes: int
    cow_bytes: int
    moved_bytes: int = 0


class BlockMove(DerivedOp, tag="block_move"):
    """A shrink moved live blocks down (compaction): ``moves`` are (source row, destination row) pairs in layer 0;
    ``count`` row moves over ``layers`` layers; ``bytes`` their K+V bytes (rows x bytes per row: the model; storage
    measures the copies, ``Copied.moved_bytes``). Blocks keep their ids, refcounts and sharing."""

    layers: int
    moves: list[tuple[int, int]]
    count: int
    bytes: int


class SlabRelease(DerivedOp, tag="slab_release"):
    """A shrink gave capacity back: ``count`` slabs (monolithic: 32-block chunks) over ``layers`` layers, ``bytes``
    of K+V (0 before storage_init fixed the row size); ``capacity_rows``: layer 0's capacity after it;
    ``copied_bytes``: the monolithic design's modelled allocate-smaller-and-copy of the kept rows (0 for slabs)."""

    layers: int
    count: int
    bytes: int
    capacity_rows: int
    copied_bytes: int = 0


def _leaves(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += _leaves(sub) if sub.__subclasses__() else [sub]
    return out


OP_TYPES: tuple[type[Op], ...] = tuple(_leaves(Op))
AnyOp = Union[OP_TYPES]  # what an op-log decoder decodes to
