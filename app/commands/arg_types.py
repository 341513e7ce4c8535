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
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction (e.g. 0.1) or 'off'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value
