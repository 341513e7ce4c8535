"""NVRTC (CUDA's runtime compiler) through ctypes: find the library, compile a CUDA source to a cubin (or PTX).

Why we compile ourselves: ``mx.fast.cuda_kernel`` never writes custom kernels to MLX's on-disk PTX cache and
prepends MLX's device headers, so every fused-kernel variant cost 1.5-2.8 s of NVRTC time in every fresh process
(docs/gpu.md, "Builds"). Our kernel sources include no header at all (``cuda_variants.py``), so a variant compiles in a
fraction of that, and ``kernel_cache.py`` keeps the cubins across processes.

NVRTC needs no GPU. The library is looked for where MLX's CUDA wheels and CUDA installs put it, in this order:
``$SLABSCOPE_NVRTC`` (a path to libnvrtc), ``site-packages/nvidia/*/lib`` (the ``nvidia-cuda-nvrtc`` wheel),
``$CUDA_HOME``/``$CUDA_PATH``, ``/usr/local/cuda*``, then the loader's default search. ``nvrtcCompileProgram``
releases the GIL (a ctypes call), so compiling in a background thread does not stall Python work in others.
This module imports neither mlx nor numpy.
"""

from __future__ import annotations

import ctypes
import glob
import os
import site
import sys
import threading
from dataclasses import dataclass

NVRTC_ENV = "SLABSCOPE_NVRTC"
_SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")


class NvrtcError(RuntimeError):
    """NVRTC is missing or a compilation failed; the message says which (with the compiler's log)."""


def _site_dirs() -> list[str]:
    dirs = list(getattr(site, "getsitepackages", lambda: [])())
    user = getattr(site, "getusersitepackages", lambda: None)()
    dirs += [user] if user else []
    dirs += [p for p in sys.path if p.endswith("site-packages")]
    return list(dict.fromkeys(d for d in dirs if d and os.path.isdir(d)))


def candidate_paths(environ: dict | None = None) -> list[str]:
    """Files that may be libnvrtc, best first (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    out: list[str] = []
    if env.get(NVRTC_ENV):
        out.append(env[NVRTC_ENV])
    for base in _site_dirs():
        out += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libnvrtc.so*")))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            out += sorted(glob.glob(os.path.join(env[var], "lib64", "libnvrtc.so*")))
    out += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))
    usable = [p for p in out if "builtins" not in os.path.basename(p) and ".alt." not in os.path.basename(p)]
    return list(dict.fromkeys(usable))


def _preload_builtins(lib_path: str) -> None:
    """libnvrtc dlopens libnvrtc-builtins by soname at compile time; a wheel's lib folder is not on the loader's
    path, so load the one beside it first (RTLD_GLOBAL: the later dlopen finds it already loaded)."""
    for path in sorted(glob.glob(os.path.join(os.path.dirname(lib_path), "libnvrtc-builtins.so*"))):
        if ".alt." in os.path.basename(path):
            continue
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            continue


@dataclass(frozen=True)
class CompileResult:
    binary: bytes     # cubin (sm_XY target) or PTX text (compute_XY target)
    kind: str         # "cubin" | "ptx"
    arch: str         # the --gpu-architecture value used
    seconds: float    # NVRTC compile time (wall, this thread)
    log: str = ""     # NVRTC's log (with ``--ptxas-options=-v``: registers, spills, shared memory)


class Nvrtc:
    """One loaded libnvrtc. ``version`` is (major, minor); ``archs`` the SM numbers it can target."""

    def __init__(self, path: str):
        self.path = path
        _preload_builtins(path)
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as exc:
            raise NvrtcError(f"cannot load {path}: {exc}") from exc
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = (major.value, minor.value)
        count = ctypes.c_int()
        self._check(self.lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "nvrtcGetNumSupportedArchs")
        archs = (ctypes.c_int * count.value)()
        self._check(self.lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
        self.archs = tuple(archs)

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise NvrtcError(f"{what} failed: {self.lib.nvrtcGetErrorString(code).decode()}")

    def target_for(self, sm: int) -> tuple[str, str]:
        """(--gpu-architecture value, "cubin" | "ptx") for a device of compute capability ``sm`` (e.g. 90): a
        cubin when this NVRTC knows the arch, else PTX for the newest arch below it (the driver JITs it)."""
        if sm in self.archs:
            return f"sm_{sm}", "cubin"
        older = [a for a in self.archs if a <= sm]
        if not older:
            raise NvrtcError(f"NVRTC {self.version} cannot target sm_{sm} (supports {self.archs})")
        return f"compute_{max(older)}", "ptx"

    def compile(self, source: str, *, sm: int, options: tuple[str, ...] = (), name: str = "kernel.cu") -> CompileResult:
        """Compile ``source`` for compute capability ``sm``. Raises NvrtcError with the log on failure."""
        import time

        arch, kind = self.target_for(sm)
        lib = self.lib
        prog = ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
                    "nvrtcCreateProgram")
        try:
            opts = [f"--gpu-architecture={arch}", *options]
            array = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
            start = time.perf_counter()
            code = lib.nvrtcCompileProgram(prog, len(opts), array)
            seconds = time.perf_counter() - start
            if code != 0:
                raise NvrtcError(f"NVRTC could not compile {name} for {arch}:\n{self._log(prog)}")
            getter, sizer = (lib.nvrtcGetCUBIN, lib.nvrtcGetCUBINSize) if kind == "cubin" else \
                (lib.nvrtcGetPTX, lib.nvrtcGetPTXSize)
            size = ctypes.c_size_t()
            self._check(sizer(prog, ctypes.byref(size)), "get binary size")
            buf = ctypes.create_string_buffer(size.value)
            self._check(getter(prog, buf), "get binary")
            return CompileResult(binary=buf.raw, kind=kind, arch=arch, seconds=seconds, log=self._log(prog))
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _log(self, prog) -> str:
        size = ctypes.c_size_t()
        self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        self.lib.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode(errors="replace")[-4000:]


_LOADED: dict[str, Nvrtc] = {}
_LOCK = threading.Lock()


def load_nvrtc(environ: dict | None = None) -> Nvrtc:
    """The first libnvrtc of ``candidate_paths`` that loads (cached per process). Raises NvrtcError naming
    every place searched when none does."""
    searched = candidate_paths(environ) + list(_SONAMES)
    with _LOCK:
        for path in searched:
            if path in _LOADED:
                return _LOADED[path]
            try:
                nvrtc = Nvrtc(path)
                # a library that loads may still lack its builtins (they sit beside it): prove it compiles
                nvrtc.compile('extern "C" __global__ void slabscope_probe() {}', sm=min(nvrtc.archs))
            except (NvrtcError, OSError, AttributeError, ValueError):
                continue
            _LOADED[path] = nvrtc
            return nvrtc
    raise NvrtcError("libnvrtc not found (looked in $SLABSCOPE_NVRTC, site-packages/nvidia/*/lib, $CUDA_HOME, "
                     "/usr/local/cuda*, the loader path); install the nvidia-cuda-nvrtc wheel")
