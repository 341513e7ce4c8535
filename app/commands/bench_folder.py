"""``slabscope bench folder``: ``compare`` and ``report`` over a folder of many recordings, fresh processes, wall
time and peak RSS (``app/bench/folder.py``).

    slabscope bench folder                                   # 2,000 names for the shipped slab sample, 3 rounds
    slabscope bench folder --files 200 --rounds 5 --commands compare --json
"""

from __future__ import annotations

from pathlib import Path

from app.commands.arg_types import positive_int_up_to
from app.commands.bench import print_figures

SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "recordings" / "sample-churn-slab.slabrec"


def add_arguments(p) -> None:
    p.add_argument("--recording", default=str(SAMPLE), help="the recording named many times (default: the shipped "
                   "slab sample)")
    p.add_argument("--files", type=positive_int_up_to(100_000), default=2000, help="names in the folder (default 2000)")
    p.add_argument("--rounds", type=positive_int_up_to(100), default=3, help="fresh runs per command (default 3)")
    p.add_argument("--commands", default="compare,report", help="comma list of compare, report (default both)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")


def main(args) -> int:
    from app.bench.folder import COMMANDS, format_report, run_folder_bench

    def measure(progress):
        commands = tuple(c.strip() for c in args.commands.split(",") if c.strip())
        if not commands or any(c not in COMMANDS for c in commands):
            raise ValueError(f"--commands: a comma list of {', '.join(COMMANDS)}, got {args.commands!r}")
        recording = Path(args.recording)
        if not recording.is_file():
            raise ValueError(f"--recording {args.recording!r} is not a file")
        return run_folder_bench(recording, args.files, args.rounds, commands, progress)

    return print_figures(args, measure, format_report)
