"""Pool configuration and the capacity arithmetic both storage designs (and the storage-free bookkeeping) share.

Capacity is counted in physical rows (one row = one block of ``block_size`` tokens, K and V). The slab design
reserves whole slabs of ``slab_blocks`` rows; the monolithic design grows its single tensor in chunks of
``MONOLITHIC_CHUNK_BLOCKS`` rows. Both are "round the needed rows up to a chunk", so one function serves both and
the bookkeeping can model slab counts and bytes without any storage.
"""

from __future__ import annotations

import msgspec

from pool.errors import PoolError
from pool.shrink_types import ShrinkPolicy

DESIGNS = ("slab", "monolithic")
# Where a block that a write leaves partly filled (a sequence's open block: the next decode token lands in it) takes
# its row: "low", the lowest free row like every block; "high", the highest row of the reserved capacity (else the
# highest free row), so the open blocks of a batch share the pool's top slab and a decode step's token writes touch
# one slab instead of one per sequence (pool/book_rows.py, ``RowBook._open_row``).
OPEN_BLOCKS = ("low", "high")
DEFAULT_BLOCK_SIZE = 32
DEFAULT_SLAB_BLOCKS = 32
MONOLITHIC_CHUNK_BLOCKS = 32  # the grow chunk of the design being replaced (origin: POOL_GROW_CHUNK_BLOCKS)
MAX_DIMENSION = 2**31 - 1     # MLX shapes are int32: block_size and slab_blocks are tensor dimensions
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}  # the dtypes storage accepts (pool/storage_base.py)


class LayerGeometry(msgspec.Struct, frozen=True):
    """The row geometry the pool's first write fixes for every layer: element dtype (name), KV heads and head size
    (one geometry per pool: a row holds the same bytes in every layer)."""

    dtype: str
    n_kv_heads: int
    head_dim: int

    def row_shape(self, block_size: int) -> tuple[int, int, int]:
        """One row's shape in a storage tensor: head-major, ``[n_kv_heads, block_size, head_dim]``, so one head's
        tokens of a row are a packed ``[block_size, head_dim]`` matrix that MLX's matmul reads in place."""
        return (self.n_kv_heads, block_size, self.head_dim)

    def bytes_per_row(self, block_size: int) -> int:
        """K + V bytes of one row in one layer (the pool's ``bytes_per_row``; a row over the pool is that many bytes
        x ``num_layers``)."""
        return 2 * block_size * self.n_kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]


class PoolConfig(msgspec.Struct, frozen=True):
    """A pool's configuration, the one type from the run form to the what-if replay: what a
    :class:`pool.PagedKVPool` (and a :class:`pool.BlockBook` alone) is built from, what a recording's metadata
    holds (``geometry``) and a replay rebuilds from. Defaults live here and nowhere else.

    ``num_layers``: layers whose storage holds every row (one row space: a row index means the same block in every
    layer). ``block_size``: tokens per block (row). ``slab_blocks``: rows per slab (the monolithic design grows by
    ``MONOLITHIC_CHUNK_BLOCKS``). ``max_blocks_per_layer``: the budget in live rows (None: none; the name says
    per layer because every layer holds that many). ``shrink``: how the pool gives capacity back
    (``pool.shrink_types.ShrinkPolicy``; default off, the origin design). ``open_blocks``: where a write's partly
    filled last block takes its row (``OPEN_BLOCKS``; default "low"; older recordings: "low")."""

    num_layers: int
    block_size: int = DEFAULT_BLOCK_SIZE
    slab_blocks: int = DEFAULT_SLAB_BLOCKS
    design: str = "slab"
    max_blocks_per_layer: int | None = None
    shrink: ShrinkPolicy = ShrinkPolicy()
    open_blocks: str = "low"

    def replace(self, **changes) -> "PoolConfig":
        """A copy with ``changes`` (field names; PoolError for an unknown one). Not validated: call ``validate``."""
        unknown = sorted(set(changes) - set(self.__struct_fields__))
        if unknown:
            raise PoolError(f"PoolConfig has no field {unknown[0]!r}")
        return msgspec.structs.replace(self, **changes)

    def validate(self) -> None:
        """Raise PoolError naming the first bad field."""
        if self.design not in DESIGNS:
            raise PoolError(f"unknown pool design {self.design!r}; choose one of {', '.join(DESIGNS)}")
        for name in ("num_layers", "block_size", "slab_blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DIMENSION:
                raise PoolError(f"PoolConfig.{name} must be an int in [1, {MAX_DIMENSION}], got {value!r}")
        budget = self.max_blocks_per_layer
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool) or budget < 0):
            raise PoolError(f"PoolConfig.max_blocks_per_layer must be None or an int >= 0, got {budget!r}")
        if not isinstance(self.shrink, ShrinkPolicy):
            raise PoolError(f"PoolConfig.shrink must be a ShrinkPolicy, got {self.shrink!r}")
        self.shrink.validate()
        check_open_blocks(self.open_blocks)


def check_open_blocks(value) -> None:
    """PoolError unless ``value`` is one of OPEN_BLOCKS."""
    if value not in OPEN_BLOCKS:
        raise PoolError(f"open_blocks must be one of {', '.join(OPEN_BLOCKS)}, got {value!r}")


def chunk_rows(design: str, slab_blocks: int) -> int:
    """Rows added by one unit of growth: a slab (slab design) or a grow chunk (monolithic design)."""
    return slab_blocks if design == "slab" else MONOLITHIC_CHUNK_BLOCKS


def capacity_for(design: str, slab_blocks: int, needed_rows: int) -> int:
    """Smallest capacity (rows) of the design that holds ``needed_rows`` rows."""
    chunk = chunk_rows(design, slab_blocks)
    return -(-needed_rows // chunk) * chunk


def blocks_for_tokens(num_tokens: int, block_size: int) -> int:
    """Number of blocks a table needs to cover ``num_tokens`` tokens."""
    return -(-num_tokens // block_size)
