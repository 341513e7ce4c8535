"""``slabscope bench bookkeeping``: host time of the slab pool's per-step decode bookkeeping, without a model
(``app/bench/decode_bookkeeping.py`` says what each figure times).

    slabscope bench bookkeeping                       # 28 layers, 16 sequences of 2,300 tokens
    slabscope bench bookkeeping --batch 8 --context 4128 --json
"""

from __future__ import annotations

from app.commands.arg_types import positive_int_up_to
from app.commands.bench import print_figures


def add_arguments(p) -> None:
    p.add_argument("--layers", type=positive_int_up_to(1024), default=28, help="pool layers (default 28)")
    p.add_argument("--batch", type=positive_int_up_to(4096), default=16, help="sequences decoding (default 16)")
    p.add_argument("--context", type=positive_int_up_to(1 << 20), default=2300,
                   help="tokens per sequence (default 2300)")
    p.add_argument("--number", type=positive_int_up_to(100_000), default=200,
                   help="calls per timed repeat (default 200)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")


def main(args) -> int:
    from app.bench.decode_bookkeeping import format_report, run_bookkeeping_bench

    return print_figures(args, lambda progress: run_bookkeeping_bench(args.layers, args.batch, args.context,
                                                                      args.number), format_report)
