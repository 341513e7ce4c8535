"""One decode step under Nsight Compute (diagnostic): which kernels a step launches and their device time. Three
warm-up steps run first; only the fourth is profiled (between cudaProfilerStart and Stop).

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --print-summary per-kernel \\
        python3 -m lab.decode_step.ncu_step slab
"""

from __future__ import annotations

import ctypes
import sys

import mlx.core as mx

from lab.decode_step.step_anatomy import paged_factory, written_state


def _cudart():
    """The CUDA runtime library (for cudaProfilerStart/Stop: ncu then profiles only the measured step)."""
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("libcudart not found: add the CUDA lib folder to LD_LIBRARY_PATH")


def main() -> int:
    from app.models import load_model

    variant = sys.argv[1]
    loaded = load_model("synthetic:qwen3-0.6b", dtype="bfloat16", device="gpu", seed=0)
    state = written_state(loaded, 8, 4096)
    make, finish = paged_factory(loaded, state, design="monolithic" if variant == "monolithic" else "slab",
                                  slab_blocks=32)
    tokens, position = mx.array([[7]] * 8), 4096
    cudart = _cudart()
    for i in range(4):
        if i == 3:
            mx.synchronize()
            cudart.cudaProfilerStart()
        caches = make([position] * 8)
        logits = loaded.model(tokens, cache=caches)[:, -1, :]
        nxt = mx.argmax(logits, axis=-1)[:, None]
        finish(caches)
        mx.eval(nxt)
        tokens, position = nxt, position + 1
    mx.synchronize()
    cudart.cudaProfilerStop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
