"""What the machine can give a pool, measured: device memory and largest buffer (MLX), host memory limits.

``host_memory()`` and ``address_space()`` are plain Python (the parent process reports a killed worker's memory
against them without importing mlx); ``device_limits()`` imports mlx and turns the figures into the
:class:`pool.limits.MemoryLimits` the pool checks every allocation against.

Room, not capacity: the pool may take what the device has minus what MLX already holds when the pool is sized
(the model's weights, mostly), and on CPU or unified memory no more than the address-space limit leaves
(``ulimit -v``: MLX segfaults when an allocation fails against it). Activations still need memory on top, so a
pool that passes can still run out; one that fails can never fit.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

from pool.limits import MemoryLimits, format_bytes


@dataclass(frozen=True)
class HostMemory:
    """Physical memory and what this process may use of it (the cgroup limit when lower)."""

    total_bytes: int
    limit_bytes: int
    source: str


def _cgroup_limit() -> int | None:
    """This process's cgroup memory limit in bytes (v2 ``memory.max`` or v1 ``memory.limit_in_bytes``), or None."""
    candidates = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3 and parts[0] == "0":
                candidates.append(Path("/sys/fs/cgroup" + parts[2]) / "memory.max")
    except OSError:
        pass
    candidates += [Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")]
    for path in candidates:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # v1 reports "unlimited" as a huge number
            return int(text)
        return None
    return None


def host_memory() -> HostMemory:
    """Physical memory (sysconf) and the cgroup limit when it is lower. Mutates nothing."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX: psutil knows
        import psutil

        total = psutil.virtual_memory().total
    limit = _cgroup_limit()
    if limit is not None and limit < total:
        return HostMemory(total, limit, f"cgroup memory limit {format_bytes(limit)}")
    return HostMemory(total, total, f"system memory {format_bytes(total)}")


def address_space() -> tuple[int, int] | None:
    """(``ulimit -v`` soft limit, bytes mapped now) when an address-space limit is set, else None."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return soft, int(line.split()[1]) * 1024
    except OSError:
        pass
    return soft, 0


def device_limits() -> MemoryLimits:
    """The room MLX's default device has for a pool now (see the module docstring). Imports mlx."""
    import mlx.core as mx

    try:
        info = dict(mx.device_info())
    except Exception:  # device_info is optional per backend; host figures still hold
        info = {}
    host = host_memory()
    total, source = host.limit_bytes, host.source
    unified = True
    if mx.default_device().type == mx.DeviceType.gpu:
        device_total = int(info.get("memory_size") or info.get("total_memory") or 0)
        unified = "memory_size" in info  # Metal reports memory_size (unified); CUDA total_memory (discrete)
        if device_total and (not unified or device_total < total):
            total, source = device_total, f"{info.get('device_name', 'GPU')} memory {format_bytes(device_total)}"
    max_buffer = int(info.get("max_buffer_length") or total)
    in_use = mx.get_active_memory()
    room = total - in_use
    source += f" minus {format_bytes(in_use)} MLX memory in use"
    mapped = address_space() if unified else None
    if mapped is not None and mapped[0] - mapped[1] < room:
        room = mapped[0] - mapped[1]
        source = f"address-space limit (ulimit -v) {format_bytes(mapped[0])} minus {format_bytes(mapped[1])} mapped"
    room = max(room, 0)
    return MemoryLimits(room, min(max_buffer, room), source)
