"""One rank of a tensor-parallel recording: the program ``mlx.launch`` starts on every rank.

``python -m app.workloads.rank_main --spec JSON --record-template PATH --run-id ID --world-size N
--launch-backend ring|mpi|nccl|jaccl`` joins the ``mx.distributed`` group the launcher set up, loads the model,
shards it with mlx-lm's ``Model.shard`` (``app.workloads.sharding``), aligns clocks with the other ranks
(``app.workloads.rank_sync``), then runs the ordinary workload (``run_workload``: the same scheduler, engine,
pool or dense caches, probes and crash-safe recording as a single-process run) with a sink that keeps the ranks in
lockstep and records ``clock`` events. The recording is ``--record-template`` with ``{rank}`` filled in; its meta
carries a ``distributed`` block (rank, world size, launch backend, host, device memory, shard map, start clock).

Output: progress lines on stdout (rank 0), ``[<backend> rank k] done|FAILED: ...`` from every rank; the launcher
forwards both. Exit status: 0 done, 1 error, 3 peer timeout, 4 launcher gone, 128+signal when stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import traceback

from app.workloads.rank_sink import RankConsole, RankEnding, RankSink
from app.workloads.spec import RunSpec

def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="app.workloads.rank_main", description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", required=True, help="the RunSpec as JSON (record_path is ignored)")
    p.add_argument("--record-template", required=True, help="recording path with {rank}")
    p.add_argument("--run-id", required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--launch-backend", required=True)
    p.add_argument("--peer-timeout", type=float, default=120.0)
    p.add_argument("--sync-interval", type=float, default=2.0)
    return p.parse_args(argv)


def device_memory() -> dict:
    """Memory of the device this rank allocates on: the GPU's total (MLX's device info) or, on CPU and unified
    memory, the system's (psutil)."""
    import mlx.core as mx

    if mx.default_device().type == mx.DeviceType.gpu:
        info = mx.device_info()
        for key in ("total_memory", "memory_size"):
            if key in info:
                ident = {k: info[k] for k in ("device_name", "uuid", "pci_bus_id") if k in info}
                return {"bytes": int(info[key]), "source": f"mx.device_info()[{key!r}]", **ident}
    import psutil

    return {"bytes": int(psutil.virtual_memory().total), "source": "system memory (psutil)"}


def init_group(launch_backend: str, world_size: int):
    """The group ``mlx.launch`` prepared (strict: a rank that cannot join fails here, not in its first step)."""
    import mlx.core as mx

    if world_size == 1:
        # no peers: mlx.launch still hands a lone ring rank an empty hostfile, which ring's init rejects
        os.environ.pop("MLX_HOSTFILE", None)
        return mx.distributed.init(strict=False)
    backend = "jaccl" if launch_backend.startswith("jaccl") else launch_backend
    group = mx.distributed.init(strict=True, backend=backend)
    if group.size() != world_size:
        raise RuntimeError(f"mx.distributed formed a group of {group.size()} ranks, expected {world_size}")
    return group


def rank_meta(args, group, smap: dict, clock: dict, spec: RunSpec) -> dict:
    return {"run_id": args.run_id, "rank": group.rank(), "world_size": group.size(),
            "launch_backend": args.launch_backend, "host": socket.gethostname(), "pid": os.getpid(),
            "device_memory": device_memory(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "shard": smap, "clock": clock, "sync_interval_s": args.sync_interval,
            "peer_timeout_s": args.peer_timeout, "record_path": spec.record_path}


def run_rank(args) -> int:
    """Everything after argument parsing (see the module docstring); returns the exit status."""
    from app.models.blas import enable_openblas
    from app.workloads.rank_watchdog import STARTUP_TIMEOUT_S, RankWatchdog

    enable_openblas()  # before mlx is imported
    spec = RunSpec(**json.loads(args.spec))
    console = RankConsole(f"{spec.backend} rank {os.environ.get('MLX_RANK', '?')}", -1)
    ending = RankEnding(console)
    watchdog = RankWatchdog(peer_timeout_s=args.peer_timeout, on_abort=ending.abort).install()
    watchdog.arm(STARTUP_TIMEOUT_S)  # joining the group and the start sync wait for every rank to start and load
    try:
        group = init_group(args.launch_backend, args.world_size)
        console.label, console.rank = f"{spec.backend} rank {group.rank()}", group.rank()
        spec = dataclasses.replace(spec, record_path=args.record_template.format(rank=group.rank()))
        return _run_workload(args, group, spec, console, ending, watchdog)
    except BaseException as exc:  # noqa: BLE001 - every failure must end the rank with a recorded, printed error
        return ending.fail(f"{type(exc).__name__}: {exc}", traceback.format_exc())


def _run_workload(args, group, spec: RunSpec, console: RankConsole, ending: RankEnding, watchdog) -> int:
    from app.models import load_model
    from app.workloads.rank_sync import RankSync
    from app.workloads.runner import run_workload
    from app.workloads.sharding import shard_loaded
    from app.workloads.worker_sink import make_sink

    loaded = load_model(spec.model, dtype=spec.dtype, device=spec.device, seed=spec.seed)
    loaded, smap = shard_loaded(loaded, group)
    sync = RankSync(group, interval_s=args.sync_interval, beat=watchdog.beat)
    watchdog.beat()
    clock = sync.start()  # waits for the slowest rank's load (still under the startup timeout)
    watchdog.arm()  # from here every step must progress within the peer timeout
    sink = RankSink(make_sink(console, spec), sync, watchdog, ending, rank_meta(args, group, smap, clock, spec),
                    console)
    ending.sink = sink
    run_workload(spec, sink.emit, sink.tick, None, loaded=loaded, attach=sink.attach, before_close=sink.finish)
    return ending.exit_code


def main(argv: list[str] | None = None) -> int:
    return run_rank(_parse(argv))


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The recording is closed: skip interpreter teardown, during which Python's signal handlers are gone and a
    # late SIGTERM from mlx.launch (stopping the ranks after one failed) would kill the rank with a misleading -15.
    os._exit(status)
