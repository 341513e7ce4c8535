"""``--metrics-port`` / ``--metrics-addr`` / ``--metrics-hold`` for commands that run workloads (``run``,
``record``): a Prometheus endpoint (``probes.prometheus``) bound before any work starts, so a port out of range is a
usage error (exit 2) and a port in use or not permitted one line (exit 1), and nothing runs (``app.commands.ports``)."""

from __future__ import annotations

import sys
import time

from app.commands.arg_types import finite_float
from app.commands.errors import RunError
from app.commands.ports import check_listenable, tcp_port_or_any


def add_metrics_arguments(parser) -> None:
    parser.add_argument("--metrics-port", type=tcp_port_or_any, default=None, metavar="PORT",
                        help="serve Prometheus metrics (footprint and its peak, pool bytes, KV usage, slabs, "
                             "fragmentation, gather runs, fused/gather decisions by reason class, token and step-time "
                             "counters, requests, probe cost; docs/export.md) on PORT while running (0: a free port)")
    parser.add_argument("--metrics-addr", default="127.0.0.1", metavar="ADDR",
                        help="address the metrics endpoint binds (default 127.0.0.1; 0.0.0.0 for every interface)")
    parser.add_argument("--metrics-hold", type=finite_float(0.0), default=0.0, metavar="SECONDS",
                        help="keep serving the final metrics this long after the run ends (default 0)")


def start_metrics(args):
    """The run's ``RunMetrics`` with its endpoint listening, or None without ``--metrics-port``. UsageError (exit
    2) for an address that does not resolve, RunError (exit 1) for a port in use or not permitted; one line."""
    if args.metrics_port is None:
        return None
    from probes.prometheus import serve_metrics

    check_listenable(args.metrics_addr, args.metrics_port, "--metrics-port")
    try:
        metrics, server = serve_metrics(args.metrics_port, args.metrics_addr)
    except OSError as exc:  # taken between the check and the bind
        raise RunError(f"--metrics-port {args.metrics_port} on {args.metrics_addr}: cannot serve metrics: "
                       f"{exc.strerror or exc}") from None
    print(f"metrics: http://{args.metrics_addr}:{server.server_port}/metrics", file=sys.stderr, flush=True)
    return metrics


def hold_metrics(args, metrics) -> None:
    """Keep the endpoint up ``--metrics-hold`` seconds after the run (a scraper's last look)."""
    if metrics is not None and args.metrics_hold > 0:
        sys.stdout.flush()
        print(f"metrics: holding the final values for {args.metrics_hold:g} s", file=sys.stderr, flush=True)
        time.sleep(args.metrics_hold)
