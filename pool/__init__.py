"""slabscope's paged KV pool: chunked-slab storage (and the monolithic baseline) behind plain-Python bookkeeping.

Importing this package never imports mlx: storage modules are loaded lazily by :class:`PagedKVPool`. See
docs/contracts.md (API) and docs/pool.md (design).
"""

from pool.block_table import BlockTable, PrefixHandle
from pool.bookkeeping import BlockBook, WritePlan
from pool.config import DESIGNS, MONOLITHIC_CHUNK_BLOCKS, PoolConfig
from pool.errors import BudgetExceeded, PoolError, SizeLimitError
from pool.fused_decision import FusedDecision, KernelCaps, register_kernel, unregister_kernel
from pool.op_apply import SEQUENCE_OPS, apply_op
from pool.pool import BlockContents, GatherResult, PagedKVPool
from pool.stats import PoolStats

__all__ = [
    "BlockBook", "BlockContents", "BlockTable", "BudgetExceeded", "DESIGNS", "FusedDecision", "GatherResult",
    "KernelCaps", "MONOLITHIC_CHUNK_BLOCKS", "PagedKVPool", "PoolConfig", "PoolError", "PoolStats",
    "PrefixHandle", "SEQUENCE_OPS", "SizeLimitError", "WritePlan", "apply_op", "register_kernel",
    "unregister_kernel",
]
