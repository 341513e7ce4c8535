"""TCP ports the commands listen on (``web --port``, ``run``/``record --metrics-port``): parsed into range by argparse
(exit 2, one line) and checked before anything binds (a port in use or not permitted: exit 1, one line naming it),
so a server never starts on a port other than the one printed (65536 + n wraps to n in ``bind``) and never dies
with a traceback from inside its event loop."""

from __future__ import annotations

import argparse
import errno
import socket

from app.commands.errors import RunError, UsageError

MAX_PORT = 65535


def _port_type(minimum: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
        if not minimum <= value <= MAX_PORT:
            raise argparse.ArgumentTypeError(f"a port is {what}, got {value}")
        return value

    parse.__name__ = "port"
    return parse


tcp_port = _port_type(1, f"1..{MAX_PORT}")
"""A TCP port 1..65535."""

tcp_port_or_any = _port_type(0, f"0..{MAX_PORT} (0: any free port)")
"""A TCP port 0..65535, 0 meaning any free port (the server prints the one it got)."""


def check_listenable(host: str, port: int, flag: str) -> None:
    """Bind (and close) every address ``host`` resolves to on ``port``, as the server will (SO_REUSEADDR, IPv6
    sockets v6-only, an address family the machine lacks skipped). UsageError when ``host`` does not resolve;
    RunError (one line naming host and port) when the port is in use or not permitted. Changes nothing."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"{flag} {port}: cannot listen on {host!r}: {exc.strerror or exc}") from None
    bound = 0
    for family, kind, proto, _, address in dict.fromkeys(infos):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPV6_V6ONLY"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:  # that family is not configured here: the server skips it too
                    continue
                if exc.errno == errno.EADDRINUSE:
                    raise RunError(f"{flag} {port}: the port is in use on {address[0]}") from None
                raise RunError(f"{flag} {port}: cannot listen on {address[0]}: "
                               f"{(exc.strerror or str(exc)).lower()}") from None
            bound += 1
    if not bound:
        raise RunError(f"{flag} {port}: no address of {host!r} can be listened on here")
