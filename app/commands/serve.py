"""``slabscope serve``: an OpenAI-compatible HTTP server on slabscope's engine (docs/serve.md).

This process is the HTTP front (aiohttp, no mlx); the model runs in one spawned engine worker (``app.serve``),
which is profiled like every slabscope worker and, with ``--record DIR``, records its session in segments. It listens
before the model loads (``/health`` says "loading"), so a port in use is one line (exit 2) and nothing loads.
SIGINT/SIGTERM stop it: open requests are cancelled, the recording gets its END record, the worker exits, and no
process is left behind. ``--tui`` runs this server as a child process and the dashboard following its recording.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from app.commands.errors import UsageError, output_dir
from app.commands.metrics_args import hold_metrics, start_metrics
from app.commands.serve_args import add_serve_arguments


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="an OpenAI-compatible server on the pool (chat/completions, streaming), "
                                     "profiled live")
    add_serve_arguments(p)
    p.set_defaults(func=main)


def build_config(args):
    """The engine worker's configuration from the arguments (names and paths checked; nothing loaded)."""
    from app.models.registry import resolve_model_name
    from app.serve.config import ServeLimits, WorkerConfig
    from app.workloads.spec import RunSpec, resolved_pool_params

    try:
        resolve_model_name(args.model)
        spec = RunSpec(scenario="serve", backend=args.backend, model=args.model, block_size=args.block_size,
                       slab_blocks=args.slab_blocks, prefill_chunk=args.prefill_chunk,
                       prefill_batch_tokens=args.prefill_batch_tokens, seed=args.seed,
                       dtype=args.dtype, device=args.device, prefix_cache=args.prefix_cache,
                       max_blocks_per_layer=args.budget, cache_limit=args.cache_limit, prefill_trim=args.prefill_trim,
                       prefill_inflight=args.prefill_inflight,
                       shrink=args.shrink, shrink_budget=args.shrink_budget, open_blocks=args.open_blocks,
                       sample_hz=args.sample_hz, snapshot_hz=args.snapshot_hz, blas_threads=args.blas_threads)
        block = resolved_pool_params(spec, {})["block_size"]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.record_keep < 2:
        raise UsageError("--record-keep must be at least 2")
    record = str(output_dir(args.record, "--record")) if args.record else None
    limits = ServeLimits(max_running=args.max_running, max_waiting=args.max_waiting,
                         default_max_tokens=args.default_max_tokens)
    return WorkerConfig(spec=spec, limits=limits, prefix_cache_blocks=max(1, args.prefix_cache_tokens // block),
                        record_dir=record, segment_bytes=args.record_segment_mib * 1024 * 1024,
                        keep_segments=args.record_keep, log_path=args.log or _default_log(args.backend))


def _default_log(backend: str) -> str:
    import os
    import tempfile
    import time

    directory = Path(tempfile.gettempdir()) / "slabscope-logs"
    directory.mkdir(parents=True, exist_ok=True)
    return str(directory / f"serve-{backend}-{os.getpid()}-{time.time_ns() % 10**9}.log")


def main(args) -> int:
    config = build_config(args)  # a bad model name, path or flag: one line before anything starts
    if args.tui:
        from app.commands.serve_tui import run_with_tui

        return run_with_tui(args)
    from app.commands.ports import check_listenable

    check_listenable(args.host, args.port, "--port")  # a port in use: one line, exit 1, nothing loads
    metrics = start_metrics(args)  # likewise for --metrics-port
    try:
        return asyncio.run(_serve(args, config, metrics))
    finally:
        hold_metrics(args, metrics)


async def _serve(args, config, metrics) -> int:
    from app.serve.engine_client import EngineDead, EngineProcess
    from app.serve.front import Front, start_site
    from app.serve.metrics import ServeMetrics

    loop = asyncio.get_running_loop()
    backend = config.spec.backend
    engine = EngineProcess(config, on_probe_event=None if metrics is None else
                           (lambda event: metrics.observe(event, backend)))
    front = Front(engine, default_temperature=args.temperature)
    if metrics is not None:
        front.on_finish = ServeMetrics(metrics.registry, engine, backend).finished
    try:
        runner, port = await start_site(front.app(), args.host, args.port)
    except OSError as exc:
        print(f"slabscope serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1  # taken between the check and the bind: a runtime failure, like every port in use
    url = f"http://{_url_host(args.host)}:{port}"
    config.front_url = url
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    engine.start(loop)
    print(f"slabscope serve: listening on {url} (loading {args.model} on the {backend} backend; engine log "
          f"{config.log_path})", file=sys.stderr, flush=True)
    try:
        ready = asyncio.ensure_future(engine.ready(args.ready_timeout))
        await asyncio.wait([ready, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            return 130
        try:
            info = ready.result()
        except EngineDead as exc:
            print(f"slabscope serve: {exc}", file=sys.stderr)
            return 1
        front.model_name = info["model"]
        front.aliases = ("default", Path(info["model"]).name)
        print(f"slabscope serve: ready: {url}/v1 model {info['model']!r} ({info['dtype']}, {info['device']}), "
              f"backend {backend}, engine pid {info['pid']}"
              + (f", recording {info['recording']}" if info.get("recording") else ""), file=sys.stderr, flush=True)
        await stop.wait()
        return 0
    finally:
        front.shutdown()  # open requests are cancelled in the engine, their clients told
        await runner.cleanup()
        await loop.run_in_executor(None, engine.stop)
        print("slabscope serve: stopped", file=sys.stderr, flush=True)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
