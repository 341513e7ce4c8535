"""The ``slabscope`` command line: dispatches to one module per sub-command (see ``app.commands``).

With no sub-command it opens the TUI. Sub-command modules are imported lazily only for parser construction,
which must stay light (no mlx import), so ``slabscope --help`` is instant and the TUI process stays mlx-free.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from app.commands.arg_types import OneLineParser
from app.commands.errors import Interrupted, RunError, UsageError
from probes.errors import RecordingDamage, RecordingError, ReplayError
from probes.outfile import OutputError

# name -> module under app.commands; order is the order shown in --help.
COMMANDS: dict[str, str] = {
    "tui": "tui",
    "run": "run",
    "generate": "generate",
    "serve": "serve",
    "load": "load",
    "record": "record",
    "compare": "compare",
    "report": "report",
    "whatif": "whatif",
    "export": "export",
    "migrate": "migrate",
    "bench": "bench",
    "warmup": "warmup",
    "web": "web",
}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="slabscope",
        description="Terminal dashboard and memory profiler for chunked-slab paged KV pools on MLX. "
        "With no command, opens the TUI on the default model and scenario.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        try:
            mod = importlib.import_module(f"app.commands.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"app.commands.{module}":
                raise
            continue  # command not built in this checkout
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    # `slabscope --open X` means `slabscope tui --open X`: options before any command belong to the TUI.
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["tui", *argv]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (already printed, one line) or --help: a return code for callers
        return exc.code if isinstance(exc.code, int) else 2
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    warnings.simplefilter("ignore", RecordingDamage)  # commands print a damaged recording's warning their own way
    try:
        return int(args.func(args) or 0)
    except (RecordingError, ReplayError) as exc:  # an unreadable input met after opening (a lazily decoded record)
        print(f"slabscope {args.command}: {exc}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"slabscope {args.command}: {exc}", file=sys.stderr)
        return 2
    except (RunError, OutputError) as exc:  # OutputError: a file refused or not written (probes.outfile)
        print(f"slabscope {args.command}: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"slabscope {args.command}: {exc}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(f"slabscope {args.command}: interrupted", file=sys.stderr)
        return 130
