"""Fused paged-decode decision: per decode step, use a fused paged-attention kernel or fall back to gather + SDPA, and
why. One decision serves every layer: layers hold the same rows in slabs of the same geometry (one row space).

Kernels themselves live in ``pool/kernels/`` (a later issue); each registers its capabilities here with
:func:`register_kernel`. With nothing registered for the running backend the answer is always gather. Reasons are
checked in a fixed order, first match wins:

1. ``SLABSCOPE_PAGED_ATTENTION_NATIVE=0`` in the environment -> gather ("disabled by ...").
2. No GPU kernel backend (MLX's default device is the CPU, or neither CUDA nor Metal is available) -> gather.
3. No kernel registered for the backend -> gather ("no fused kernel for this backend").
4. dtype / head_dim the kernel does not support -> gather.
5. batch outside the kernel's [min_batch, max_batch] -> gather.
6. one K/V tensor of the layer (a slab; the monolithic design's whole layer) holds more elements than the kernel
   addresses (``max_buffer_elements``: 2^32 - 1, a 32-bit index) -> gather. A hard limit, like the dtype: the
   kernel must decline rather than compute wrong attention (docs/sizing.md has the audit of the kernels' index
   arithmetic; the kernel entry refuses the same sizes, ``pool/kernels/plan.py``).
7. the layer has more than one slab and the kernel reads a single pool buffer (``multi_slab=False``) -> gather.
8. context below the kernel's measured break-even (``min_context``) -> gather.
9. the kernel variant for this slab count is not built yet (``readiness``, a probe the caller passes: the CUDA
   kernels compile in the background, ``pool/kernels/cuda_builds.py``) -> gather ("kernel for N slabs compiling").
Otherwise fused. This module imports mlx only inside :func:`detect_backend`.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from pool.limits import INDEX_LIMIT, index_range_problem

ENV_VAR = "SLABSCOPE_PAGED_ATTENTION_NATIVE"
Readiness = Callable[[int], "str | None"]  # num_slabs -> None (kernel ready) or the reason it is not
REASON_NO_KERNEL = "no fused kernel for this backend"


@dataclass(frozen=True)
class KernelCaps:
    """What a registered fused kernel supports, and the thresholds below which gather measured faster."""

    backend: str                      # "metal" | "cuda"
    dtypes: frozenset[str]            # e.g. {"bfloat16", "float16"}
    head_dims: frozenset[int]         # e.g. {64, 128}
    multi_slab: bool                  # reads per-slab base pointers (True) or one pool buffer (False)
    min_batch: int = 1
    max_batch: int | None = None
    min_context: int = 0              # measured break-even context length (tokens)
    max_buffer_elements: int = INDEX_LIMIT - 1  # largest K/V tensor (elements) the kernel indexes correctly


@dataclass(frozen=True)
class FusedDecision:
    use_fused: bool
    reason: str


_REGISTRY: dict[str, KernelCaps] = {}


def register_kernel(caps: KernelCaps) -> None:
    """Register (or replace) the fused kernel of ``caps.backend``."""
    _REGISTRY[caps.backend] = caps


def unregister_kernel(backend: str) -> None:
    _REGISTRY.pop(backend, None)


def registered_kernel(backend: str) -> KernelCaps | None:
    return _REGISTRY.get(backend)


def detect_backend() -> str:
    """"cuda" or "metal" when MLX's default device is a GPU with that backend, else "cpu"."""
    import mlx.core as mx

    if mx.default_device().type != mx.DeviceType.gpu:
        return "cpu"
    if mx.cuda.is_available():
        return "cuda"
    if mx.metal.is_available():
        return "metal"
    return "cpu"


def decide(*, num_slabs: int, dtype: str, head_dim: int, batch_size: int, context_len: int | None = None,
           backend: str | None = None, caps: KernelCaps | None = None, environ: dict | None = None,
           readiness: Readiness | None = None, buffer_elements: int | None = None) -> FusedDecision:
    """The decision for one layer. ``backend``/``caps``/``environ`` default to the live ones (tests inject).
    ``readiness(num_slabs)``: None when the kernel for that many slabs can launch now, else why not.
    ``buffer_elements``: elements of the layer's largest K (or V) tensor (``pool.limits.largest_buffer_elements``;
    None: unknown, not checked)."""
    env = os.environ if environ is None else environ
    if env.get(ENV_VAR, "").strip() == "0":
        return FusedDecision(False, f"disabled by {ENV_VAR}=0")
    backend = detect_backend() if backend is None else backend
    if backend not in ("cuda", "metal"):
        return FusedDecision(False, f"no GPU kernel backend ({backend})")
    caps = registered_kernel(backend) if caps is None else caps
    if caps is None:
        return FusedDecision(False, REASON_NO_KERNEL)
    rejected = _unsupported(caps, dtype, head_dim, batch_size)
    if rejected:
        return FusedDecision(False, rejected)
    if buffer_elements is not None:
        too_big = index_range_problem(buffer_elements, f"one K/V tensor of the layer exceeds the {backend} kernel's "
                                      "index range", caps.max_buffer_elements)
        if too_big:
            return FusedDecision(False, too_big)
    if num_slabs > 1 and not caps.multi_slab:
        return FusedDecision(False, f"layer has {num_slabs} slabs; the {backend} kernel reads one pool buffer")
    if context_len is not None and context_len < caps.min_context:
        return FusedDecision(False, f"context {context_len} below measured break-even {caps.min_context}")
    pending = readiness(num_slabs) if readiness is not None else None
    if pending:
        return FusedDecision(False, pending)
    return FusedDecision(True, f"fused {backend} kernel ({num_slabs} slab{'s' if num_slabs != 1 else ''})")


def _unsupported(caps: KernelCaps, dtype: str, head_dim: int, batch_size: int) -> str | None:
    if dtype not in caps.dtypes:
        return f"dtype {dtype} unsupported by the {caps.backend} kernel ({', '.join(sorted(caps.dtypes))})"
    if head_dim not in caps.head_dims:
        dims = ", ".join(str(d) for d in sorted(caps.head_dims))
        return f"head_dim {head_dim} unsupported by the {caps.backend} kernel ({dims})"
    if batch_size < caps.min_batch:
        return f"batch {batch_size} below measured break-even {caps.min_batch}"
    if caps.max_batch is not None and batch_size > caps.max_batch:
        return f"batch {batch_size} above the kernel's maximum {caps.max_batch}"
    return None


@dataclass
class DecisionCounters:
    """Outcome counts over layers (a step's decision counts once per layer it applies to, as when each layer
    decided alone): fused vs gather, and decisions by reason; ``last``: the decision in force."""

    fused: int = 0
    gather: int = 0
    by_reason: Counter = field(default_factory=Counter)
    last: FusedDecision | None = None

    def record(self, decision: FusedDecision, layers: int) -> None:
        """Count ``decision`` for ``layers`` layers and make it the one in force."""
        if decision.use_fused:
            self.fused += layers
        else:
            self.gather += layers
        self.by_reason[decision.reason] += layers
        self.last = decision
