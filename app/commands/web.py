"""``slabscope web``: the same dashboard in a browser, served by textual-serve.

Each browser session starts its own ``slabscope tui`` process with every dashboard option given here (textual-serve
runs the command in a pseudo-terminal and streams it over a websocket): each tab is its own live run, and says so
when it starts (``SlabscopeApp``'s web-tab notice); recordings (R, ``--open``) are files every tab can open.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from app.commands.errors import RunError
from app.commands.ports import check_listenable, tcp_port
from app.commands.tui import add_arguments


TABS_NOTE = ("each browser tab runs its own dashboard process: with a live run, each tab starts its own run; "
             "recordings (R, --open) are files every tab can open")


def add_parser(sub) -> None:
    p = sub.add_parser("web", help="serve the dashboard in a browser (textual-serve)",
                       description=f"The dashboard in a browser; {TABS_NOTE}.")
    p.add_argument("--host", default="localhost", help="interface to listen on (default localhost)")
    p.add_argument("--port", type=tcp_port, default=8000, help="port, 1..65535 (default 8000)")
    p.add_argument("--public-url", default=None, help="URL the browser should use, when behind a proxy")
    add_arguments(p)
    p.set_defaults(func=main)


def tui_command(args: argparse.Namespace) -> str:
    """The shell command each browser session runs: this interpreter, ``-m app tui`` and every dashboard option
    (``app.commands.tui.add_arguments``, read from its parser: an option added there is passed on with no change
    here) that differs from its default."""
    parts = [sys.executable, "-m", "app", "tui"]
    dashboard = argparse.ArgumentParser(add_help=False)
    add_arguments(dashboard)
    for action in dashboard._actions:
        value, flag = getattr(args, action.dest, action.default), action.option_strings[-1]
        if value == action.default or value is None:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            parts.append(flag)
        elif isinstance(action, argparse._AppendAction):
            for item in value:
                parts += [flag, str(item)]
        else:
            parts += [flag, ",".join(value) if isinstance(value, list) else str(value)]
    return shlex.join(parts)


def main(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C. The port is checked before the server starts (ports.py): in use, one line, exit 1."""
    from textual_serve.server import Server

    check_listenable(args.host, args.port, "--port")
    command = tui_command(args)
    print(f"slabscope web: serving `{command}` at http://{args.host}:{args.port}", file=sys.stderr)
    print(f"slabscope web: {TABS_NOTE}", file=sys.stderr)
    try:
        Server(command, host=args.host, port=args.port, title="slabscope", public_url=args.public_url).serve()
    except OSError as exc:  # taken between the check and the bind
        raise RunError(f"--port {args.port}: cannot listen on {args.host}: {exc.strerror or exc}") from None
    return 0
