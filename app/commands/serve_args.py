"""The options of ``slabscope serve``, apart from the command (mlx-free): ``app.commands.serve`` builds its parser
with them and ``app.commands.serve_tui`` rebuilds a server's command line from them."""

from __future__ import annotations

from app.commands.arg_types import (add_mlx_cache_arguments, add_open_blocks_argument, add_shrink_arguments,
                                    finite_float, non_negative_int, positive_int)
from app.commands.metrics_args import add_metrics_arguments
from app.commands.ports import tcp_port_or_any
from app.models.registry import DTYPE_NAMES
from app.workloads.spec import BACKENDS

READY_TIMEOUT_S = 600.0


def add_serve_arguments(p) -> None:
    """Every option of ``slabscope serve`` on parser ``p`` (its own parser, and ``--tui``'s rebuilding of its
    server's command line)."""
    p.add_argument("--model", default="smollm2-135m", help="model name, synthetic:NAME or mlx-lm directory")
    p.add_argument("--backend", choices=BACKENDS, default="slab", help="KV storage (default slab)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=tcp_port_or_any, default=8080, help="port (default 8080; 0: a free one, printed)")
    p.add_argument("--dtype", default=None, choices=DTYPE_NAMES)
    p.add_argument("--device", choices=("cpu", "gpu"), default=None)
    p.add_argument("--seed", type=int, default=0, help="synthetic models' weights")
    p.add_argument("--block-size", type=positive_int, default=None, help="tokens per block (default 32)")
    p.add_argument("--slab-blocks", type=positive_int, default=None, help="blocks per slab (default 32)")
    p.add_argument("--prefill-chunk", type=positive_int, default=None, help="prefill chunk in tokens (default 256)")
    p.add_argument("--prefill-batch-tokens", type=non_negative_int, default=None,
                   help="tokens a prefill step may batch over sequences at the same chunk (default 8192; 0: one "
                        "sequence per step)")
    p.add_argument("--budget", type=positive_int, default=None, metavar="BLOCKS",
                   help="pool budget: max blocks per layer (requests wait for room; one that can never fit is a 400)")
    p.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false", default=True,
                   help="do not share prompt blocks across requests (pool backends share them by default)")
    p.add_argument("--prefix-cache-tokens", type=positive_int, default=8192, metavar="TOKENS",
                   help="tokens of finished prompts the prefix cache keeps for reuse, least recently used out "
                        "first (default 8192)")
    p.add_argument("--max-running", type=positive_int, default=64, help="sequences in the batch at once (default 64)")
    p.add_argument("--max-waiting", type=positive_int, default=1024,
                   help="requests queued beyond them; more get 429 (default 1024)")
    p.add_argument("--default-max-tokens", type=positive_int, default=512,
                   help="max_tokens of a request that names none (capped by the model's positions; default 512)")
    p.add_argument("--temperature", type=finite_float(0.0, 2.0), default=1.0,
                   help="temperature of a request that names none (default 1.0, OpenAI's; 0: greedy)")
    p.add_argument("--record", default=None, metavar="DIR",
                   help="record the engine's session into DIR (segments of --record-segment-mib; follow it live with "
                        "slabscope --open DIR)")
    p.add_argument("--record-segment-mib", type=positive_int, default=256, metavar="MIB",
                   help="start a new recording file past this size (default 256)")
    p.add_argument("--record-keep", type=positive_int, default=8, metavar="N",
                   help="keep the newest N segments, remove older ones this server wrote (default 8, at least 2)")
    p.add_argument("--blas-threads", type=positive_int, default=None, metavar="N",
                   help="OpenBLAS threads of the engine on a CPU (default: OpenBLAS's own; 1 on a busy machine)")
    p.add_argument("--sample-hz", type=finite_float(0.0, 1000.0), default=10.0, help="memory samples per second")
    p.add_argument("--snapshot-hz", type=finite_float(0.0, 1000.0), default=2.0, help="pool snapshots per second")
    add_mlx_cache_arguments(p, who="the engine")
    add_shrink_arguments(p)
    add_open_blocks_argument(p)
    add_metrics_arguments(p)
    p.add_argument("--tui", action="store_true", help="run the server and the dashboard following it in one "
                                                      "command (records into --record DIR, default a new directory)")
    p.add_argument("--log", default=None, metavar="FILE", help="the engine worker's log (default a temp file)")
    p.add_argument("--ready-timeout", type=finite_float(1.0), default=READY_TIMEOUT_S, metavar="SECONDS",
                   help="give up when the model has not loaded within this (default 600)")
