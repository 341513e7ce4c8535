"""The fused decode kernel's tuning knobs and their defaults, in one place (plain Python, no mlx).

The knobs are arguments, never environment variables: a launch plan (``plan.plan_decode``) is made with a
``KernelTuning`` and carries it, and the CUDA and Metal launches read the unroll from the plan, so one object decides
a launch's splits and its kernel variant. The running product uses ``DEFAULT_TUNING``; ``slabscope bench decode
--unroll --target-blocks --min-chunk-tokens`` times other variants (``lab/kernel_tuning/`` runs the grid and picks the
fastest; its winner becomes the defaults below, with the table in docs/gpu.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

UNROLLS = (1, 2, 4, 8, 16)  # powers of two: a warp step (tokens per warp step x unroll) must divide a block


@dataclass(frozen=True)
class KernelTuning:
    """One kernel variant's knobs. Raises ValueError (one line) on a value no kernel can run."""

    unroll: int = 8               # warp steps whose K/V loads are issued before any is used (memory parallelism)
    target_blocks: int = 8192     # thread blocks wanted per launch: several waves on a 132-SM H200 (a last
    #                               partial wave idles SMs); the plan splits contexts until batch x heads x splits
    #                               reaches it
    min_chunk_tokens: int = 1024  # never split a sequence finer than this: a thread block's fixed work (queries,
    #                               the warps' merge, its partials) is paid per chunk, and at 256 tokens it cost
    #                               ~8% at 8k-16k contexts (docs/gpu.md, "Tuning")

    def __post_init__(self) -> None:
        if self.unroll not in UNROLLS:
            raise ValueError(f"unroll {self.unroll} is not one of {', '.join(map(str, UNROLLS))}")
        for name in ("target_blocks", "min_chunk_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def as_dict(self) -> dict:
        """The knobs as a plain dict (what ``bench decode`` JSON and ``thresholds.json`` record as ``kernel``)."""
        return asdict(self)


DEFAULT_TUNING = KernelTuning()  # chosen by measurement on the H200 (docs/gpu.md, "Tuning")
