"""Fused paged-decode kernels (one per file: ``paged_decode_cuda.py``, ``paged_decode_metal.py``) and their
registration with the pool's fused-decision registry (``pool/fused_decision.py``).

Importing this package registers the kernels whose use is justified by a measurement: the CUDA kernel with the
batch/context thresholds that ``slabscope bench decode`` measured on an H200 (``thresholds.json`` beside this
file, written by ``slabscope bench decode --write-thresholds``). The Metal kernel has never run (no Mac here): it is
registered only when ``SLABSCOPE_METAL_KERNEL=1`` opts in, and docs/gpu.md marks it unverified. Stays mlx-free.
"""

from __future__ import annotations

import json
import os

from pool.fused_decision import KernelCaps, register_kernel, unregister_kernel
from pool.kernels.plan import SUPPORTED_DTYPES, SUPPORTED_HEAD_DIMS, KernelUnsupported

THRESHOLDS_PATH = os.path.join(os.path.dirname(__file__), "thresholds.json")
METAL_OPT_IN = "SLABSCOPE_METAL_KERNEL"


def load_thresholds(path: str = THRESHOLDS_PATH) -> dict:
    """{backend: {"fused_wins": bool, "min_batch": int, "min_context": int, ...provenance}}, or {} when nothing
    was measured. ``fused_wins: false`` (the microbench found no region where fused beats gather) registers
    nothing, so every decision is gather with the registry's "no fused kernel" reason."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def kernel_caps(backend: str, thresholds: dict) -> KernelCaps:
    """Capabilities of ``backend``'s kernel with its measured thresholds (defaults: 1 and 0 when unmeasured)."""
    measured = thresholds.get(backend, {})
    return KernelCaps(backend=backend, dtypes=frozenset(SUPPORTED_DTYPES), head_dims=frozenset(SUPPORTED_HEAD_DIMS),
                      multi_slab=True, min_batch=int(measured.get("min_batch", 1)),
                      min_context=int(measured.get("min_context", 0)))


def register_kernels(environ: dict | None = None, thresholds: dict | None = None) -> list[str]:
    """(Re-)register the kernels justified by measurements (CUDA) or opted in (Metal); return their backends."""
    env = os.environ if environ is None else environ
    thresholds = load_thresholds() if thresholds is None else thresholds
    registered = []
    for backend in ("cuda", "metal"):
        unregister_kernel(backend)
        measured = backend in thresholds and bool(thresholds[backend].get("fused_wins", True))
        opted_in = backend == "metal" and env.get(METAL_OPT_IN, "") == "1"
        if measured or opted_in:
            register_kernel(kernel_caps(backend, thresholds))
            registered.append(backend)
    return registered


register_kernels()

__all__ = ["KernelUnsupported", "THRESHOLDS_PATH", "kernel_caps", "load_thresholds", "register_kernels"]
