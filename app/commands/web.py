"""``slabscope web``: the same dashboard in a browser, served by textual-serve.

Each browser session starts its own ``slabscope tui`` process with the options given here (textual-serve runs the
command in a pseudo-terminal and streams it over a websocket).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from app.commands.errors import RunError
from app.commands.ports import check_listenable, tcp_port
from app.commands.tui import add_arguments


def add_parser(sub) -> None:
    p = sub.add_parser("web", help="serve the dashboard in a browser (textual-serve)")
    p.add_argument("--host", default="localhost", help="interface to listen on (default localhost)")
    p.add_argument("--port", type=tcp_port, default=8000, help="port, 1..65535 (default 8000)")
    p.add_argument("--public-url", default=None, help="URL the browser should use, when behind a proxy")
    add_arguments(p)
    p.set_defaults(func=main)


def tui_command(args: argparse.Namespace) -> str:
    """The shell command each browser session runs: this interpreter, ``-m app tui`` and the dashboard options."""
    parts = [sys.executable, "-m", "app", "tui", "--model", args.model, "--backends", ",".join(args.backends),
             "--gate", str(args.gate)]
    parts += ["--ranks", str(args.ranks), "--launch-backend", args.launch_backend]
    for flag, value in (("--scenario", args.scenario), ("--block-size", args.block_size),
                        ("--slab-blocks", args.slab_blocks), ("--recordings", args.recordings)):
        if value is not None:
            parts += [flag, str(value)]
    for path in args.open:
        parts += ["--open", path]
    if args.no_start:
        parts.append("--no-start")
    return shlex.join(parts)


def main(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C. The port is checked before the server starts (ports.py): in use, one line, exit 1."""
    from textual_serve.server import Server

    check_listenable(args.host, args.port, "--port")
    command = tui_command(args)
    print(f"slabscope web: serving `{command}` at http://{args.host}:{args.port}", file=sys.stderr)
    try:
        Server(command, host=args.host, port=args.port, title="slabscope", public_url=args.public_url).serve()
    except OSError as exc:  # taken between the check and the bind
        raise RunError(f"--port {args.port}: cannot listen on {args.host}: {exc.strerror or exc}") from None
    return 0
