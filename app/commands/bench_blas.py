"""``slabscope bench blas``: MLX's CPU matmul on its bundled reference BLAS against Debian's OpenBLAS, each
measurement in a fresh process, interleaved rounds (``app/bench/blas.py`` says how it is measured). The README's
OpenBLAS speed-up figure comes from this command.

    slabscope bench blas                          # 1024^3 fp32, mean of 10, 5 rounds, one OpenBLAS thread
    slabscope bench blas --rounds 7 --size 2048 --json
"""

from __future__ import annotations

from app.commands.arg_types import positive_int_up_to
from app.commands.bench import print_figures


MAX_SIZE = 16384  # three fp32 arrays of 1 GiB each, seconds per matmul on the reference BLAS


def add_arguments(p) -> None:
    p.add_argument("--rounds", type=positive_int_up_to(1000), default=5,
                   help="interleaved rounds, order alternating (default 5)")
    p.add_argument("--size", type=positive_int_up_to(MAX_SIZE), default=1024,
                   help="matmul side N: N x N times N x N (default 1024)")
    p.add_argument("--repeats", type=positive_int_up_to(10_000), default=10,
                   help="timed matmuls per measurement, after one warm-up (default 10)")
    p.add_argument("--threads", type=positive_int_up_to(256), default=1,
                   help="OPENBLAS_NUM_THREADS (default 1, as each worker uses)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")


def main(args) -> int:
    from app.bench.blas import format_report, run_blas_bench

    return print_figures(args, lambda progress: run_blas_bench(args.rounds, args.size, args.repeats, args.threads,
                                                               progress), format_report)
