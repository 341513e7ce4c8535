"""Session metadata: versions, device, platform and code commit (worker side; mlx imported inside the call)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from functools import lru_cache
from importlib import metadata

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@lru_cache(maxsize=None)
def _version(dist: str) -> str | None:
    """The installed version of ``dist`` (read once per process: parsing its metadata costs ~2 ms)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=None)
def git_commit(root: str = REPO_ROOT) -> str | None:
    """The checkout's commit (with "+dirty" when files changed), or None when unknown (no git, no commits). Read
    once per process and root: the code a process runs is what it imported at its start, and the two git calls
    (~11 ms) were paid again by every recording's start, inside a short run's timed window."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=2)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=2)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def device_description() -> str:
    """MLX's default device (e.g. "cpu" or "gpu"), plus the GPU's name when MLX reports one."""
    try:
        import mlx.core as mx

        dev = mx.default_device()
        name = str(getattr(dev, "type", dev)).replace("DeviceType.", "")
        if "gpu" in name:
            try:
                info = mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info()
                name += f" ({info.get('device_name', info.get('architecture', ''))})"
            except Exception:  # device_info is optional per backend; the type alone is still true
                pass
        return name
    except ImportError:
        return "unknown (mlx not importable)"


def device_memory_model() -> str:
    """"discrete" when MLX allocates on a CUDA GPU (device memory is not in the process RSS), else "unified" (CPU,
    or Metal on Apple silicon, where MLX buffers are host memory and count in RSS)."""
    try:
        import mlx.core as mx

        on_gpu = "gpu" in str(getattr(mx.default_device(), "type", "")).lower()
        return "discrete" if on_gpu and mx.cuda.is_available() else "unified"
    except (ImportError, AttributeError):
        return "unified"


def device_memory_figures() -> dict:
    """What MLX reports of the default device's memory: ``memory_bytes`` (total) and ``max_buffer_bytes`` (its
    largest single allocation), each only where reported (CPU reports neither). ``slabscope whatif`` sizes
    against them."""
    try:
        import mlx.core as mx

        info = dict(mx.device_info())
    except Exception:  # device_info is optional per backend
        return {}
    figures = {}
    for key, name in (("memory_size", "memory_bytes"), ("total_memory", "memory_bytes"),
                      ("max_buffer_length", "max_buffer_bytes")):
        if info.get(key):
            figures[name] = int(info[key])
    return figures


def host_memory_figures() -> dict:
    """The machine's RAM and swap in bytes (``ram_bytes``, ``swap_bytes``; psutil): with the device's memory, what
    a recording's memory figures can reach (``probes.bounds.FigureBounds``). Empty when psutil cannot say."""
    try:
        import psutil

        return {"ram_bytes": int(psutil.virtual_memory().total), "swap_bytes": int(psutil.swap_memory().total)}
    except Exception:  # psutil missing or refused (a sandbox without /proc): the bounds fall back to 1 PiB
        return {}


def memory_model_of(meta: dict) -> str:
    """The memory model a session ran under (mlx-free): its ``memory_model`` field, or, for sessions recorded
    before that field existed, inferred from a Linux GPU device (MLX's GPU backend on Linux is CUDA)."""
    if meta.get("memory_model") in ("discrete", "unified"):
        return meta["memory_model"]
    on_gpu = str(meta.get("device", "")).lower().startswith(("gpu", "device(gpu"))
    return "discrete" if on_gpu and str(meta.get("platform", "")).lower().startswith("linux") else "unified"


def collect_meta(extra: dict | None = None) -> dict:
    """Metadata for a session: what ``extra`` says (workload: model, scenario, params, backend, pool) plus
    versions, device, host, Python, commit and wall-clock start time. ``extra`` wins on conflicts."""
    meta = {
        "slabscope_version": _version("slabscope"),
        "mlx_version": _version("mlx"),
        "mlx_lm_version": _version("mlx-lm"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "device": device_description(),
        "memory_model": device_memory_model(),
        "device_limits": device_memory_figures(),
        "host_memory": host_memory_figures(),
        "commit": git_commit(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "pid": os.getpid(),
    }
    meta.update(extra or {})
    return meta
