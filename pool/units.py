"""Bytes as text and text as bytes: the one formatter and the one parser every part of slabscope uses (plain Python).

Binary units throughout (KiB = 2^10 bytes, MiB = 2^20, ...), as MLX's and the OS's memory figures are counted.
``format_bytes`` is for prose and cells whose unit varies (three significant figures, never an exponent);
``mib`` is for table columns whose header names the unit (one decimal, thousands separated); ``parse_size`` reads
what a user types (``512M``, ``2G``, ``1.5GiB``). They live in ``pool/`` because the pool's own error messages
use them and every other package may import the pool.
"""

from __future__ import annotations

import math

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
MIB = 2**20
_PARSE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def format_bytes(count: float) -> str:
    """``12`` -> ``'12 B'``, ``1536`` -> ``'1.5 KiB'``, ``2**34`` -> ``'16 GiB'``, ``5_597_000_000`` -> ``'5.21 GiB'``,
    637.04 MiB -> ``'637 MiB'``: the largest unit that keeps the number below 1024, rounded to two decimals below
    10 and one above (at least three significant figures), trailing zeros dropped; negative values keep their
    sign."""
    value = float(count)
    for unit in UNITS:
        if abs(value) < 1024 or unit == UNITS[-1]:
            break
        value /= 1024
    if unit == "B":
        return f"{value:.0f} B"
    text = f"{value:.{2 if abs(value) < 10 else 1}f}".rstrip("0").rstrip(".")
    return f"{text} {unit}"


def mib(count: float | None) -> str:
    """A table cell in MiB (the column header says so): ``'5,338.4'``; ``'-'`` for None (no figure)."""
    return "-" if count is None else f"{count / MIB:,.1f}"


def parse_size(text: str) -> int:
    """Bytes from ``0``, ``1048576``, ``512M``, ``2G``, ``1.5GiB`` (K/M/G/T = KiB/MiB/GiB/TiB; a trailing ``B`` or
    ``iB`` is optional). ValueError (one line) for anything else, negative or not finite."""
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = raw[-1:] if raw[-1:] in _PARSE_UNITS and raw[-1:] else ""
    number = raw[:-1] if unit else raw
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a size (e.g. 0, 512M, 2G)") from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"a size must be a finite number >= 0, got {text!r}")
    return int(value * _PARSE_UNITS[unit])
