"""Parent side of a distributed recording: one ``mlx.launch`` per backend, watched until every rank ended (mlx-free).

``launch_command`` builds mlx's own launcher command line (``mlx.launch``, installed with mlx) running
``app.workloads.rank_main`` on every rank: ``-n N`` on this host, or ``--hostfile`` across hosts (the same code
path: mlx.launch starts remote ranks over ssh). It picks free ports for the ring (one per rank, consecutive) and
NCCL rendezvous, and passes the environment every rank needs. ``mlx.launch`` itself gives each NCCL rank its GPU
(``CUDA_VISIBLE_DEVICES=rank``) and its rendezvous address, and stops the other ranks (SIGTERM) when one exits
with an error; the ranks' watchdogs turn that into a recorded error.

``RankLaunch`` runs the launcher in its own process group, forwards its output, and never waits forever: once a
rank reported a failure the launcher gets ``grace_s`` to finish stopping the others (a rank stopped with SIGSTOP
or stuck in a driver would otherwise keep it waiting), and at ``timeout`` the whole group is killed.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from app.workloads.hosts import ssh_exit_text

LAUNCH_BACKENDS = ("ring", "mpi", "nccl", "jaccl")
_RANK_FAILED = re.compile(r"^\[\S+ rank (\d+)\] FAILED: (.*)$")
_LAUNCHER_NODE = re.compile(r"Node with rank (\d+) (exited with code (-?\d+)|was killed)")


class LaunchError(ValueError):
    """A distributed launch that cannot start (bad hostfile, missing launcher or mpirun); one line."""


MLX_BUILDS = {"mlx-cuda-12": "cuda", "mlx-cuda-13": "cuda", "mlx-cuda": "cuda", "mlx-cpu": "cpu",
              "mlx-metal": "metal"}  # the distribution that carries each MLX build's library (mlx[cuda12], ...)


def installed_mlx_build() -> tuple[str, str]:
    """(kind, name and version) of the MLX build installed beside this interpreter, read from the package metadata
    without importing mlx (the parent of a launch stays mlx-free): kind "cuda", "cpu", "metal", or "unknown" (mlx
    built from source: nothing to go by, so nothing is refused for it)."""
    from importlib import metadata

    for name, kind in MLX_BUILDS.items():
        try:
            return kind, f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "unknown", "mlx (no build package found)"


_LAUNCH_MAIN = ("import sys; from mlx._distributed_utils.launch import main; sys.argv[0] = 'mlx.launch'; "
                "sys.exit(main())")


def launcher_command() -> list[str]:
    """``mlx.launch`` of the running interpreter's environment, else the one on PATH, else the entry point that
    console script runs, through this interpreter (an mlx installed without its scripts, as on a GPU box)."""
    beside = os.path.join(os.path.dirname(sys.executable), "mlx.launch")
    found = beside if os.access(beside, os.X_OK) else shutil.which("mlx.launch")
    return [found] if found else [sys.executable, "-c", _LAUNCH_MAIN]


def hostfile_ranks(path: str) -> int:
    """Number of ranks a ``mlx.launch`` hostfile starts (one per host entry; the file read and checked by
    ``app.workloads.hosts.hostfile_hosts``, its one reader)."""
    from app.workloads.hosts import hostfile_hosts

    try:
        return len(hostfile_hosts(path))
    except ValueError as exc:
        raise LaunchError(str(exc)) from None


def free_port_base(count: int, *, attempts: int = 50) -> int:
    """A port P such that P..P+count-1 are free on this host now (ring ranks listen on consecutive ports)."""
    for _ in range(attempts):
        base = random.randint(20000, 60000 - count)
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise LaunchError(f"no {count} consecutive free ports found")


@dataclass(frozen=True)
class LaunchPlan:
    """How to start the ranks: their count, mlx's distributed backend, an optional hostfile, the interpreter."""

    ranks: int
    backend: str = "ring"
    hostfile: str | None = None
    python: str = field(default_factory=lambda: sys.executable)
    env: tuple[str, ...] = ()

    def __post_init__(self):
        if self.backend not in LAUNCH_BACKENDS:
            raise LaunchError(f"unknown launch backend {self.backend!r} (choose one of {', '.join(LAUNCH_BACKENDS)})")
        if self.ranks < 1:
            raise LaunchError(f"--ranks must be >= 1, got {self.ranks}")
        if self.hostfile is not None and hostfile_ranks(self.hostfile) != self.ranks:
            raise LaunchError(f"hostfile {self.hostfile} lists {hostfile_ranks(self.hostfile)} hosts but --ranks is "
                              f"{self.ranks}")
        if self.backend == "jaccl" and self.hostfile is None:
            raise LaunchError("the jaccl backend needs --hostfile (hosts with their RDMA devices: "
                              "mlx.distributed_config writes one)")
        if self.backend == "mpi" and shutil.which("mpirun") is None:
            raise LaunchError("the mpi backend needs mpirun on PATH (install Open MPI)")
        if self.backend == "nccl" and self.hostfile is None:  # every rank runs here, on this MLX (a hostfile's
            kind, build = installed_mlx_build()             # hosts have their own)
            if kind in ("cpu", "metal"):
                raise LaunchError(f"the nccl backend needs MLX's CUDA build (pip install 'mlx[cuda12]'); this one is "
                                  f"{build}: use --launch-backend ring")

    def rank_env(self) -> list[str]:
        """Environment for every rank: unbuffered output, and on one host its cores shared out for BLAS."""
        env = ["PYTHONUNBUFFERED=1", *self.env]
        if self.hostfile is None and not any(e.startswith("OPENBLAS_NUM_THREADS=") for e in env):
            env.append(f"OPENBLAS_NUM_THREADS={max(1, (os.cpu_count() or 1) // self.ranks)}")
        return env

    def launcher_args(self) -> list[str]:
        args = [*launcher_command(), "--backend", self.backend, "--python", self.python]
        args += ["--hostfile", self.hostfile] if self.hostfile else ["-n", str(self.ranks)]
        if self.backend == "ring" and self.hostfile is None:
            args += ["--starting-port", str(free_port_base(self.ranks))]
        if self.backend == "nccl":
            args += ["--nccl-port", str(free_port_base(1))]
        for entry in self.rank_env():
            args += ["--env", entry]
        return args


def launch_command(plan: LaunchPlan, spec, *, record_template: str, run_id: str, peer_timeout: float,
                   sync_interval: float) -> list[str]:
    """The full ``mlx.launch ... -- -m app.workloads.rank_main ...`` command for ``spec`` (a RunSpec)."""
    return [*plan.launcher_args(), "--", "-m", "app.workloads.rank_main", "--spec", json.dumps(spec.to_dict()),
            "--record-template", record_template, "--run-id", run_id, "--world-size", str(plan.ranks),
            "--launch-backend", plan.backend, "--peer-timeout", f"{peer_timeout:g}",
            "--sync-interval", f"{sync_interval:g}"]


class RankLaunch:
    """One launcher process (its own process group) and what it printed. ``failures`` maps rank -> the error a
    rank printed; ``launcher_notes`` rank -> what mlx.launch said about its exit."""

    def __init__(self, command: list[str], *, stream=None, grace_s: float = 30.0, hosts: dict[int, str] | None = None):
        self.command = command
        self.hosts = hosts or {}  # rank -> the hostfile's ssh name (a remote rank's exit 255 is ssh failing)
        self.stream = stream or sys.stderr
        self.grace_s = grace_s
        self.failures: dict[int, str] = {}
        self.launcher_notes: dict[int, str] = {}
        self.killed: str | None = None
        self.lines: list[str] = []
        self._process: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._first_failure: float | None = None

    def start(self) -> "RankLaunch":
        # stdin is a pipe nobody writes: mlx.launch forwards stdin to the ranks and polls it (a /dev/null stdin
        # would make that poll spin)
        self._process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self._reader = threading.Thread(target=self._read, name="slabscope-launch-output", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        for raw in self._process.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            self.stream.write(line + "\n")
            self.stream.flush()
            failed = _RANK_FAILED.match(line.strip())
            if failed:
                self.failures.setdefault(int(failed.group(1)), failed.group(2))
                self._first_failure = self._first_failure or time.monotonic()
            node = _LAUNCHER_NODE.search(line)
            if node:
                rank, code = int(node.group(1)), node.group(3)
                note = "stopped by mlx.launch" if code is None else _exit_text(int(code))
                ssh = None if code is None else ssh_exit_text(self.hosts.get(rank), int(code))
                self.launcher_notes[rank] = f"{note}: {ssh}" if ssh else note
                self._first_failure = self._first_failure or time.monotonic()

    def wait(self, timeout: float) -> int:
        """Wait for the launcher to exit; kill its group at ``timeout`` or ``grace_s`` after a failure. Returns
        the launcher's exit status (negative: killed by that signal)."""
        deadline = time.monotonic() + timeout
        try:
            while self._process.poll() is None:
                now = time.monotonic()
                if now > deadline:
                    self._kill_group(f"cancelled after {timeout:g} s")
                elif self._first_failure is not None and now > self._first_failure + self.grace_s:
                    self._kill_group(f"ranks still running {self.grace_s:g} s after a rank failed")
                time.sleep(0.1)
        except BaseException:  # the waiter was interrupted (Ctrl-C, record told to stop): no rank outlives it
            self.stop("slabscope record was stopped")
            raise
        self._reader.join(5.0)
        self._process.stdin.close()
        return self._process.returncode

    @property
    def returncode(self) -> int | None:
        """The launcher's exit status (None while it runs or before it started)."""
        return None if self._process is None else self._process.poll()

    def stop(self, why: str) -> None:
        """Stop the launcher and every rank now (its whole process group; the ranks record why they stopped)."""
        if self._process is not None:
            self._kill_group(why)

    def _kill_group(self, why: str) -> None:
        if self.killed is None:
            self.killed = why
            self.stream.write(f"[launcher] {why}: stopping the process group\n")
        for sig in (signal.SIGTERM, signal.SIGCONT, signal.SIGKILL):
            try:
                os.killpg(self._process.pid, sig)
            except ProcessLookupError:
                return
            if sig == signal.SIGCONT and self._group_gone(2.0):  # a stopped rank wakes up to its pending SIGTERM
                break
        self._process.wait(5.0)

    def _group_gone(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for every process of the launcher's group to exit; True once none is left."""
        deadline = time.monotonic() + seconds
        while True:
            self._process.poll()  # reap the launcher: a zombie still counts as a member of its group
            try:
                os.killpg(self._process.pid, 0)
            except ProcessLookupError:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def live_pids(processes) -> list[int]:
    """Pids of the ``psutil.Process`` handles whose process still runs (a zombie, or a recycled pid, does not)."""
    import psutil

    out = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                out.append(process.pid)
        except psutil.Error:
            pass
    return out


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"
