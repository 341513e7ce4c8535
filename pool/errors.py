"""Exceptions raised by the pool. Every public operation validates before it mutates, so a raised error means the
pool is exactly as it was before the call."""

from __future__ import annotations


class PoolError(Exception):
    """Invalid use of the pool (unknown sequence/block/handle, bad shape or dtype, broken invariant, ...)."""


class BudgetExceeded(PoolError):
    """An operation would need more live blocks in a layer than ``max_blocks_per_layer`` allows."""


class SizeLimitError(PoolError):
    """An allocation the device cannot hold (total memory, largest buffer, shape range); raised before allocating,
    because MLX ends the process with SIGSEGV on a failed huge allocation instead of raising."""
