"""slabscope's paged KV pool: chunked-slab storage (and the monolithic baseline) behind plain-Python bookkeeping.

Importing this package never imports mlx: storage modules are loaded lazily by :class:`PagedKVPool`. See
docs/contracts.md (API) and docs/pool.md (design).
"""

from pool.block_table import BlockTable, PrefixHandle
from pool.book_state import BookState
from pool.bookkeeping import BlockBook, WritePlan
from pool.config import DESIGNS, MONOLITHIC_CHUNK_BLOCKS, LayerGeometry, PoolConfig
from pool.errors import BudgetExceeded, PoolError, SizeLimitError
from pool.fused_decision import FusedDecision, KernelCaps, register_kernel, unregister_kernel
from pool.op_apply import SEQUENCE_OPS, apply_op
from pool.ops import AnyOp, Copied, DerivedOp, Op, SequenceOp
from pool.pool import GatherResult, PagedKVPool
from pool.shrink_types import SHRINK_MODES, ShrinkPolicy, ShrinkReport
from pool.snapshot import build_snapshot
from pool.snapshot_types import LayerSnapshot, ObservedFigures, Owner, PoolSnapshot, RowState, row_state
from pool.stats import PoolBytes, PoolCounters, PoolStats
from pool.step_view import StepView
from pool.write_slots import WriteSlots

__all__ = [
    "AnyOp", "BlockBook", "BlockTable", "BookState", "BudgetExceeded", "Copied", "DESIGNS", "DerivedOp",
    "FusedDecision", "GatherResult", "KernelCaps", "LayerGeometry", "LayerSnapshot", "MONOLITHIC_CHUNK_BLOCKS",
    "ObservedFigures", "Op", "Owner", "PagedKVPool", "PoolBytes", "PoolConfig", "PoolCounters", "PoolError",
    "PoolSnapshot", "PoolStats", "PrefixHandle", "RowState", "SEQUENCE_OPS", "SHRINK_MODES", "SequenceOp",
    "ShrinkPolicy", "ShrinkReport", "SizeLimitError", "StepView", "WritePlan", "WriteSlots", "apply_op",
    "build_snapshot", "register_kernel", "row_state", "unregister_kernel",
]
