"""The on-disk cache of compiled kernels: one file per (kernel name, target arch, NVRTC version, options).

The kernel name already carries a hash of its source (``cuda_variants.kernel_name``), so an edited kernel, another
GPU architecture, another NVRTC or other compile options each get their own file and never reuse a stale binary.
Location: ``$SLABSCOPE_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/slabscope/cuda-kernels``, else
``~/.cache/slabscope/cuda-kernels``. Writes are atomic (temporary file + rename), so concurrent processes filling the
same cache never read a half-written binary. A cache that cannot be written (read-only home) costs only speed:
``store`` reports it and the kernel still runs from memory. Pure Python.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

CACHE_ENV = "SLABSCOPE_KERNEL_CACHE"


def default_cache_dir(environ: dict | None = None) -> str:
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return env[CACHE_ENV]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "slabscope", "cuda-kernels")


class KernelCache:
    """Owns the files under ``directory``; ``load``/``store`` by key. Never raises for I/O: a miss is None."""

    def __init__(self, directory: str | None = None):
        self.directory = directory or default_cache_dir()
        self.hits = self.misses = self.stores = 0
        self.store_error: str | None = None

    @staticmethod
    def key(name: str, arch: str, nvrtc_version: tuple[int, int], options: tuple[str, ...], kind: str) -> str:
        """The file name of a binary: readable prefix, then a hash of everything that changes the binary."""
        digest = hashlib.sha1(repr((name, arch, nvrtc_version, options)).encode()).hexdigest()[:12]
        return f"{name}.{arch}.nvrtc{nvrtc_version[0]}.{nvrtc_version[1]}.{digest}.{kind}"

    def path(self, key: str) -> str:
        return os.path.join(self.directory, key)

    def load(self, key: str) -> bytes | None:
        try:
            with open(self.path(key), "rb") as f:
                data = f.read()
        except OSError:
            self.misses += 1
            return None
        if not data:
            self.misses += 1
            return None
        self.hits += 1
        return data

    def store(self, key: str, data: bytes) -> bool:
        """Write ``data`` atomically; False (and ``store_error`` set) when the directory is not writable."""
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=".part")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path(key))
        except OSError as exc:
            self.store_error = f"kernel cache {self.directory} not writable: {exc}"
            return False
        self.stores += 1
        return True

    def entries(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.directory) if not n.startswith(".tmp-"))
        except OSError:
            return []
