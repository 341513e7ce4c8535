"""argparse value types shared by the sub-commands: bad sizes become usage errors (exit 2, one line), never a
traceback from deep inside a worker."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


_SIZE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def byte_size(text: str) -> int:
    """Bytes, with an optional binary unit: ``0``, ``1048576``, ``512M``, ``2G`` (K/M/G/T = KiB/MiB/GiB/TiB)."""
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = raw[-1:] if raw[-1:] in _SIZE_UNITS and raw[-1:] else ""
    number = raw[:-1] if unit else raw
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 0, 512M, 2G)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a size must be >= 0, got {text!r}")
    return int(value * _SIZE_UNITS[unit])


def trim_fraction(text: str) -> float | None:
    """A fraction >= 0, or ``off`` (None)."""
    if text.strip().lower() in ("off", "none", "no"):
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction >= 0 (e.g. 0.05) or 'off'")
    return value


def add_mlx_cache_arguments(parser, *, who: str = "every backend alike") -> None:
    """``--cache-limit`` (MLX's buffer-cache limit) and ``--prefill-trim`` (app/workloads/cache_trim.py), the
    run parameters that decide how much freed memory MLX keeps; ``who`` says what they apply to."""
    parser.add_argument("--cache-limit", type=byte_size, default=None, metavar="BYTES",
                        help=f"MLX's buffer-cache limit (mx.set_cache_limit) for {who}: e.g. 0, 512M, 2G "
                             "(default: MLX's)")
    parser.add_argument("--prefill-trim", type=trim_fraction, default=0.05, metavar="FRACTION",
                        help="trim MLX's cache between prefill chunks above FRACTION x (weights + cached K/V), "
                             f"never below 64 MiB; 'off' never (default 0.05); {who}")
