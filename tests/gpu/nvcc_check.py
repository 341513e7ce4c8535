"""Compile the CUDA paged-decode kernels with a local ``nvcc`` (no GPU needed): catches syntax/type errors and
shows registers/spills before any device time is spent.

Reproduces what ``mx.fast.cuda_kernel`` generates (MLX 0.32 ``build_kernel``: default header, user header, the
signature with ``const T*`` inputs, ``Shape`` parameters for ``<name>_shape`` uses, template constants) and
compiles it for sm_90 with ptxas's resource report. MLX's JIT headers (``mlx/backend/cuda/device/*.cuh``) ship
inside libmlx.so, not as files: pass a folder holding them with ``--mlx-include`` (see docs/gpu.md).

    python tests/gpu/nvcc_check.py --mlx-include /tmp/mlxinc [--cccl DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from pool.kernels import paged_decode_cuda as cu  # noqa: E402
from pool.kernels.kernel_build import slab_input_names  # noqa: E402

DEFAULT_HEADER = """
#include "mlx/backend/cuda/device/utils.cuh"
#include <cooperative_groups.h>
#define inf cuda::std::numeric_limits<float>::infinity()
"""
CUDA_TYPES = {"bfloat16": "__nv_bfloat16", "float16": "__half", "float32": "float", "int32": "int32_t"}


def mlx_kernel_source(name: str, header: str, source: str, inputs: list[tuple[str, str, int]],
                      outputs: list[tuple[str, str]], template: list[tuple[str, object]]) -> str:
    """The translation unit MLX's build_kernel would make. inputs: (name, dtype, ndim); outputs: (name, dtype)."""
    text = DEFAULT_HEADER + header + "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
    text += f"__global__ void {name}(\n"
    params = []
    for arg, dtype, ndim in inputs:
        params.append(f"    const {CUDA_TYPES[dtype]}* {arg}")
        if ndim > 0 and f"{arg}_shape" in source:
            params.append(f"    const __grid_constant__ Shape {arg}_shape")
    params += [f"    {CUDA_TYPES[dtype]}* {arg}" for arg, dtype in outputs]
    text += ",\n".join(params) + ") {\n"
    for key, value in template:
        if isinstance(value, bool):
            text += f"  constexpr bool {key} = {'true' if value else 'false'};\n"
        elif isinstance(value, int):
            text += f"  constexpr int {key} = {value};\n"
        else:
            text += f"  using {key} = {CUDA_TYPES[value]};\n"
    return text + "\n" + source + "\n}\n\n} // namespace mlx::core::cu\n"


def pass1_unit(dtype: str, head_dim: int, group: int, n_kv: int, block_size: int, num_slabs: int,
               direct: bool) -> str:
    slabs = [(n, dtype, 4) for n in slab_input_names(num_slabs)]
    outputs = [("out", dtype)] if direct else [("part_acc", "float32"), ("part_ml", "float32")]
    template = [("T", dtype), ("HEAD_DIM", head_dim), ("GROUP", group), ("N_KV", n_kv),
                ("BLOCK_SIZE", block_size), ("UNROLL", cu.unroll_for(block_size, head_dim)),
                ("NUM_SLABS", num_slabs)]
    name = f"pass1_{'direct' if direct else 'split'}"
    return mlx_kernel_source(name, cu.HEADER, cu.pass1_source(num_slabs, direct),
                             [("queries", dtype, 3), ("meta", "int32", 1), *slabs], outputs, template)


def merge_unit(dtype: str, head_dim: int) -> str:
    return mlx_kernel_source("merge", cu.HEADER, cu.MERGE_SOURCE,
                             [("part_acc", "float32", 4), ("part_ml", "float32", 4)], [("out", dtype)],
                             [("T", dtype), ("HEAD_DIM", head_dim)])


def compile_unit(text: str, mlx_include: str, cccl: str | None) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cu")
        with open(path, "w") as f:
            f.write(text)
        cmd = ["nvcc", "-arch=sm_90", "-std=c++17", "-cubin", "-Xptxas", "-v", "-I", mlx_include, "-o",
               os.path.join(tmp, "k.cubin"), path]
        if cccl:
            cmd[1:1] = ["-I", cccl]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"nvcc failed:\n{done.stderr}\n--- source ---\n{text}")
        return done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlx-include", required=True)
    parser.add_argument("--cccl", default=None)
    args = parser.parse_args()
    cases = [("bfloat16", 128, 2, 8, 32, 1, True), ("bfloat16", 128, 2, 8, 32, 64, False),
             ("float16", 64, 4, 4, 32, 8, False), ("float16", 128, 8, 2, 16, 512, False),
             ("bfloat16", 64, 1, 2, 4, 2, True)]
    for case in cases:
        report = compile_unit(pass1_unit(*case), args.mlx_include, args.cccl)
        usage = [ln.strip() for ln in report.splitlines() if "Used" in ln or "spill" in ln]
        print("pass1", case, "|", " ; ".join(usage))
    for dtype, head_dim in (("bfloat16", 128), ("float16", 64)):
        report = compile_unit(merge_unit(dtype, head_dim), args.mlx_include, args.cccl)
        print("merge", dtype, head_dim, "|", " ; ".join(ln.strip() for ln in report.splitlines() if "Used" in ln))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
