"""``slabscope bench follow``: the cost of following a growing recording (``GrowingSession.refresh``) against
opening the whole file again, on a synthetic session (``app/bench/follow.py`` says how it is measured). mlx-free.
docs/distributed.md's follow figures come from this command.

    slabscope bench follow                        # a one-hour session, 5 rounds after a warm-up
    slabscope bench follow --seconds 600 --rounds 3 --json
"""

from __future__ import annotations

from app.commands.arg_types import finite_float, positive_int_up_to
from app.commands.bench import print_figures


def add_arguments(p) -> None:
    p.add_argument("--rounds", type=positive_int_up_to(1000), default=5, help="timed rounds after a warm-up "
                   "(default 5)")
    p.add_argument("--seconds", type=finite_float(10.0, 86400.0), default=3600.0,
                   help="synthetic session length in seconds of fake time (default 3600: about 22 MiB)")
    p.add_argument("--tail-records", type=positive_int_up_to(100_000), default=200,
                   help="records appended after the session is opened (default 200)")
    p.add_argument("--flush-records", type=positive_int_up_to(100_000), default=5,
                   help="records appended before each refresh: about one writer flush (default 5)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")


def main(args) -> int:
    from app.bench.follow import format_report, run_follow_bench

    return print_figures(args, lambda progress: run_follow_bench(args.rounds, args.seconds, args.tail_records,
                                                                 args.flush_records, progress), format_report)
