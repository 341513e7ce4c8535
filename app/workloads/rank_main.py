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
import threading
import time
import traceback

from app.workloads.spec import RunSpec

MIB = 1024 * 1024
STATUS_EVERY_S = 5.0


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


class RankConsole:
    """Progress lines for the launcher's output (called with every probe event, from the probe thread)."""

    def __init__(self, label: str, rank: int, stream=None):
        self.label, self.rank = label, rank
        self.stream = stream or sys.stdout
        self.footprint = 0
        self._next_status = time.monotonic() + STATUS_EVERY_S

    def say(self, text: str) -> None:
        self.stream.write(f"[{self.label}] {text}\n")
        self.stream.flush()

    def __call__(self, event: dict) -> None:
        kind = event.get("kind")
        if kind == "sample":
            self.footprint = int(event.get("footprint", 0))
        if self.rank != 0:
            return
        if kind == "phase":
            self.say(f"phase {event.get('name')} {event.get('edge')} (step {event.get('step')})")
        elif kind == "sample" and time.monotonic() >= self._next_status:
            self._next_status = time.monotonic() + STATUS_EVERY_S
            self.say(f"step {event.get('step')} tokens {event.get('tokens')} "
                     f"max(act+cache) now {self.footprint / MIB:.1f} MiB")

    def done(self, summary: dict) -> None:
        foot = summary.get("footprint", {})
        outputs = summary.get("outputs", {})
        peak = foot.get("max_footprint_bytes", 0)
        self.say(f"done: {summary.get('steps')} steps, {outputs.get('generated_tokens')} tokens generated "
                 f"(outputs {outputs.get('digest', '?')[:12]}), max(act+cache) {peak / MIB:.1f} MiB, "
                 f"clock residual skew {1e3 * (summary.get('distributed', {}).get('residual_skew_s') or 0):.3f} ms")

    def failed(self, text: str) -> None:
        self.say(f"FAILED: {text}")


class RankEnding:
    """Ends the rank exactly once: a normal finish or an error (main thread), or an abort (watchdog thread,
    while the main thread may be stuck in a collective). Owns the lock that orders them."""

    def __init__(self, console: RankConsole):
        self.console = console
        self.sink: RankSink | None = None
        self.exit_code = 0
        self._lock = threading.Lock()
        self._ended = False

    def finish(self, close):
        with self._lock:
            if self._ended:
                return None
            self._ended = True
            return close()

    def fail(self, text: str, tb: str) -> int:
        with self._lock:
            if not self._ended:
                self._ended, self.exit_code = True, 1
                if self.sink is not None:
                    self.sink.close_with_error(text, tb)
                self.console.failed(text)
        return self.exit_code

    def abort(self, text: str, code: int) -> None:
        """Watchdog thread: record the error, close the recording and exit the process now."""
        if self._lock.acquire(timeout=10.0) and not self._ended:
            self._ended, self.exit_code = True, code
            if self.sink is not None:
                self.sink.abort(text)
            self.console.failed(text)
        sys.stdout.flush()
        os._exit(self.exit_code)


class RankSink:
    """Wraps the ordinary probes sink (``worker_sink.make_sink``): syncs at phase starts, every few seconds of
    steps and at the end (``RankSync``), beats the watchdog, and puts the ``distributed`` block in the meta."""

    def __init__(self, inner, sync, watchdog, ending: RankEnding, dist_meta: dict, console: RankConsole):
        self.inner, self.sync, self.watchdog, self.ending = inner, sync, watchdog, ending
        self.dist_meta, self.console = dist_meta, console
        self.session = None

    def _digest(self) -> int:
        from app.workloads.outputs import outputs_summary

        if self.session is None:
            return 0
        scheduler = self.session.scheduler
        return int(outputs_summary(scheduler.finished, scheduler.running)["digest"][:15], 16)

    def _sync(self, reason: str, step: int, tokens: int) -> None:
        self.inner.emit(dict(self.sync.sync(reason, step, tokens, self._digest), t=time.monotonic()))

    def emit(self, event: dict) -> None:
        self.watchdog.beat()
        if event.get("kind") == "phase" and event.get("edge") == "start":
            self._sync("phase", int(event.get("step", 0)), int(event.get("tokens", 0)))
        self.inner.emit(event)

    def tick(self, step: int, tokens: int) -> None:
        self.watchdog.beat()
        self.inner.tick(step, tokens)
        if self.sync.due(step):
            self._sync("step", step, tokens)

    def attach(self, meta: dict, session) -> None:
        self.session = session
        self.inner.attach(dict(meta, distributed=self.dist_meta), session)

    def finish(self, summary: dict) -> dict:
        """Normal end (``before_close``): a last sync, then the probes' summary and END record."""
        self._sync("end", int(summary.get("steps", 0)), _tokens(summary))
        self.watchdog.disarm()
        summary = dict(summary, distributed=self.sync.summary())
        sent = self.ending.finish(lambda: self.inner.finish(summary))
        if sent is not None:
            self.console.done(sent)
        return sent if sent is not None else summary

    def close_with_error(self, text: str, tb: str) -> None:
        """Main thread, after an exception: the error event and an END record saying so (no collective)."""
        self.watchdog.disarm()
        self.inner.emit({"kind": "error", "t": time.monotonic(), "text": text, "traceback": tb})
        self.inner.finish({"error": text, "distributed": self.sync.summary()})

    def abort(self, text: str) -> None:
        probes = getattr(self.inner, "probes", None)
        if probes is not None:
            probes.abort(text)


def _tokens(summary: dict) -> int:
    return int(summary.get("prefill_tokens", 0)) + int(summary.get("decode_tokens", 0))


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
