"""Shrink: the pool's policy for giving slabs back, and what one shrink did (plain data, no mlx).

The origin design front-loads and only appends: after a burst every slab stays allocated until the process ends.
A pool built with a ``ShrinkPolicy`` gives capacity back at the shrink points its caller marks
(``PagedKVPool.shrink``, one per workload step; ``pool.ops.ShrinkTick`` in the op log):

* ``off``: nothing (the origin behaviour). The shrink points are still logged, so a what-if replay can ask what
  another policy would have done (``slabscope whatif --shrink``).
* ``release``: drop the highest slabs whose rows are all free, highest first, stopping at the first slab that
  holds a live row, so physical rows stay dense from 0 (a free slab below a live one stays: lowest-row-first reuse
  fills it next).
* ``compact``: as ``release``, and when the highest slab still holds live blocks that fit in the free rows below
  it, move them down (one copy per block and layer, the blocks keeping their ids, refcounts and sharing; every
  table that references them is updated) so it can be released too. At most ``budget_bytes`` are moved per
  shrink point; a slab whose live rows fill more than ``max_fill`` of it is left alone (moving most of a slab to
  free one is not worth its copies).

The monolithic design has one tensor per layer: giving capacity back is allocate-smaller-and-copy of every kept row,
so a release there copies the kept rows (counted against the same byte budget, measured like every copy) and is
declined, with the reason, when they exceed it (``docs/pool.md``).
"""

from __future__ import annotations

import msgspec

from pool.errors import PoolError

SHRINK_MODES = ("off", "release", "compact")
DEFAULT_SHRINK_BUDGET = 16 * 2**20  # bytes moved per shrink point (all layers): ~11 blocks of SmolLM2-135M fp32
DEFAULT_MAX_FILL = 0.5


class ShrinkPolicy(msgspec.Struct, frozen=True):
    """How a pool gives capacity back (see the module docstring). Recorded with the pool's geometry, so replays
    and rebuilt snapshots re-execute it exactly."""

    mode: str = "off"
    budget_bytes: int = DEFAULT_SHRINK_BUDGET
    max_fill: float = DEFAULT_MAX_FILL

    def validate(self) -> None:
        """PoolError naming the first bad field."""
        if self.mode not in SHRINK_MODES:
            raise PoolError(f"unknown shrink policy {self.mode!r}; choose one of {', '.join(SHRINK_MODES)}")
        budget = self.budget_bytes
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            raise PoolError(f"shrink budget_bytes must be an int >= 0, got {budget!r}")
        fill = self.max_fill
        if isinstance(fill, bool) or not isinstance(fill, (int, float)) or not 0.0 < fill <= 1.0:
            raise PoolError(f"shrink max_fill must be a fraction in (0, 1], got {fill!r}")

    @property
    def active(self) -> bool:
        return self.mode != "off"


class ShrinkReport(msgspec.Struct, frozen=True):
    """What one shrink point did, as the running pool measured it (``PagedKVPool.shrink``).

    ``blocks_moved``: row moves over all layers; ``bytes_moved``: what MLX's allocator saw the moves (and a
    monolithic shrink's copy) allocate (pool/copy_meter.py), beside ``bytes_moved_model`` (rows x bytes per row);
    ``slabs_released`` (monolithic: 32-block chunks) and ``bytes_released`` (their K+V bytes) over all layers;
    ``trimmed_bytes``: MLX buffer cache handed back to the system after the release (0 when none was due);
    ``*_s``: wall seconds of each part; ``declined``: why a possible release did not happen ("" if none).
    ``footprint_before``/``_after``: MLX's active + cache around the storage work, each read after the device
    synchronised (so work in flight before the shrink point is not counted): ``reclaimed`` is what the process
    footprint really fell by (0 and 0 when storage had nothing to do)."""

    blocks_moved: int = 0
    bytes_moved: int = 0
    bytes_moved_model: int = 0
    slabs_released: int = 0
    bytes_released: int = 0
    trimmed_bytes: int = 0
    move_s: float = 0.0
    release_s: float = 0.0
    trim_s: float = 0.0
    declined: str = ""
    footprint_before: int = 0
    footprint_after: int = 0

    @property
    def did_something(self) -> bool:
        return bool(self.blocks_moved or self.slabs_released or self.trimmed_bytes)

    @property
    def reclaimed(self) -> int:
        return self.footprint_before - self.footprint_after
