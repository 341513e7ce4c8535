"""Bytes a read of the slabs copies, by phase (prefill / decode): measured from MLX's allocator, with the
shape-derived figure beside it.

A gather (``PagedKVPool.gather_visible``) joins a sequence's visible K/V rows into a fresh contiguous tensor: that
tensor is the copy. With metering on, each read runs inside ``pool.copy_meter.allocated_during`` (everything the
read depends on is evaluated first, MLX's peak is reset, the read is evaluated alone and the bytes MLX allocated
for it are charged), exactly as growth and copy-on-write are charged to ``bytes_copied``. The paged prefill route
(``pool/kernels/paged_prefill.py``) reports its history reads here too: slab slices are views, so a metered chunk
charges what evaluating those views allocated: 0 when MLX keeps them views.

Cost: metering evaluates every read on its own and waits for the device twice per read (one layer, one sequence),
so it breaks the step's pipelining: ``slabscope run`` meters (its summary is the figure of record); benchmarks
that time steps leave it off and show the ``_model`` figure, which is the bytes of the K/V the reads returned
(what a read should copy, not what it did). Plain Python; mlx only inside :meth:`GatherMeter.read`.
"""

from __future__ import annotations

from typing import Callable

PHASES = ("prefill", "decode")


class GatherMeter:
    """Owns the per-phase byte tallies; ``measuring`` switches allocator metering (off: the measured tallies stay
    None and only the model is kept)."""

    def __init__(self, measuring: bool = False) -> None:
        self.measuring = measuring
        self.measured: dict[str, int | None] = {phase: None for phase in PHASES}
        self.model: dict[str, int] = {phase: 0 for phase in PHASES}

    def read(self, phase: str, work: Callable[[], list], settle: Callable[[], list], *,
             model_bytes: bool = True) -> list:
        """Run ``work()`` (it returns the read's arrays); when metering, evaluate ``settle()`` (the arrays the read
        depends on, asked for only then: a layer's slab lists, rebuilt per read) and then the read alone, and charge
        what MLX allocated to ``phase``. ``model_bytes``: the arrays are copies (a gather), so their bytes are added
        to the model; False for views (the paged route), whose model is 0. Returns the arrays."""
        if phase not in PHASES:
            raise ValueError(f"unknown read phase {phase!r}; one of {', '.join(PHASES)}")
        if not self.measuring:
            arrays = work()
        else:
            from pool.copy_meter import allocated_during

            arrays, allocated = allocated_during(work, settle())
            self.measured[phase] = (self.measured[phase] or 0) + allocated
        if model_bytes:
            self.model[phase] += sum(array.nbytes for array in arrays)
        return arrays

    def counters(self) -> dict:
        """The PoolCounters fields this meter owns."""
        return {"prefill_bytes_gathered": self.measured["prefill"], "decode_bytes_gathered": self.measured["decode"],
                "prefill_bytes_gathered_model": self.model["prefill"],
                "decode_bytes_gathered_model": self.model["decode"]}
