"""argparse value types shared by the sub-commands: bad values become usage errors (exit 2, one line), never a
traceback from deep inside a worker and never a value quietly taken as something else (``nan`` for a gate that
then never fails, ``-1`` for a temperature, ``slab,slab`` for two runs writing one file)."""

from __future__ import annotations

import argparse
import math

from app.workloads.inflight_bound import (DEFAULT_ALLOWANCE,  # import-light: mlx is imported inside its functions
                                          OFF_WORDS, parse_allowance)

BACKENDS = ("slab", "dense", "monolithic")  # app.workloads.spec.BACKENDS, kept import-light for the parsers


def _whole_number(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An int >= 1."""
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """An int >= 0."""
    return _whole_number(text, 0)


def positive_int_up_to(maximum: int):
    """A type for an int in ``[1, maximum]`` (a bound that keeps a typo from asking for hours or terabytes)."""
    def parse(text: str) -> int:
        value = positive_int(text)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum:,}, got {value:,}")
        return value

    parse.__name__ = "whole number"
    return parse


def finite_float(minimum: float | None = None, maximum: float | None = None, *, above: bool = False):
    """A type for a finite float in ``[minimum, maximum]`` (``above``: strictly greater than ``minimum``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if minimum is not None and (value <= minimum if above else value < minimum):
            raise argparse.ArgumentTypeError(f"must be {'>' if above else '>='} {minimum:g}, got {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum:g}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def backends_list(text: str) -> list[str]:
    """``slab,dense[,monolithic]`` -> list, refusing an empty list, unknown names and a name given twice (each
    backend writes one file named after it: a repeat would overwrite its own recording)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in BACKENDS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"backends must be a comma list of {', '.join(BACKENDS)}; got {text!r}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"backend listed twice in {text!r}")
    return names


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr (exit 2), pointing at ``--help`` instead of
    printing the usage block. Sub-parsers made by ``add_subparsers`` inherit the class."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def byte_size(text: str) -> int:
    """Bytes, with an optional binary unit: ``0``, ``1048576``, ``512M``, ``2G`` (``pool.units.parse_size``)."""
    from pool.units import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_byte_size(text: str) -> int:
    """A size as ``byte_size`` that is at least one byte: a device's largest buffer (0 B would allocate nothing,
    so it is a typo or "unlimited" misread, never a question worth answering)."""
    value = byte_size(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


def trim_fraction(text: str) -> float | str | None:
    """A fraction >= 0, ``off`` (None) or ``auto`` (RunSpec.trim_fraction)."""
    if text.strip().lower() in OFF_WORDS:
        return None
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction >= 0 (e.g. 0.05), 'auto' or 'off'")
    return value


def inflight_allowance(text: str) -> int | None:
    """A byte size as ``byte_size`` (0 allowed: nothing in flight beyond one operation), or ``off`` (None)."""
    try:
        return parse_allowance(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_mlx_cache_arguments(parser, *, who: str = "every backend alike") -> None:
    """``--cache-limit`` (MLX's buffer-cache limit) and ``--prefill-trim`` (app/workloads/cache_trim.py), the
    run parameters that decide how much freed memory MLX keeps; ``who`` says what they apply to."""
    parser.add_argument("--cache-limit", type=byte_size, default=None, metavar="BYTES",
                        help=f"MLX's buffer-cache limit (mx.set_cache_limit) for {who}: e.g. 0, 512M, 2G "
                             "(default: MLX's)")
    parser.add_argument("--prefill-trim", type=trim_fraction, default="auto", metavar="FRACTION",
                        help="trim MLX's cache between prefill chunks above FRACTION x (weights + cached K/V), "
                             "never below 64 MiB; 'off' never; 'auto' (default): 0.05 when --prefill-inflight is "
                             f"off, else never (the bound keeps the cache in check); {who}")
    parser.add_argument("--prefill-inflight", type=inflight_allowance, default=DEFAULT_ALLOWANCE, metavar="BYTES",
                        help="bound the memory a prefill chunk holds in flight to BYTES above the weights and K/V "
                             "storage (MLX's memory limit while the chunk is encoded): e.g. 4G; 'off' unbounded "
                             f"(default {DEFAULT_ALLOWANCE // 2**30}G); {who}")


OPEN_BLOCKS_CHOICES = ("auto", "low", "high")  # app.workloads.spec.OPEN_BLOCKS_CHOICES, import-light for the parsers


def add_open_blocks_argument(parser) -> None:
    """``--open-blocks``: where the pool puts a sequence's partly filled last block (pool/config.py OPEN_BLOCKS)."""
    parser.add_argument("--open-blocks", choices=OPEN_BLOCKS_CHOICES, default="auto",
                        help="rows of the pool backends' open blocks (the block a sequence's next token lands in): "
                             "high (the top of the reserved capacity, so a decode step writes one slab), low (the "
                             "lowest free row, like every block), auto (high where the pool reserves ahead: slab "
                             "with --shrink off; default)")


SHRINK_MODES = ("off", "release", "compact")  # pool.shrink_types.SHRINK_MODES, kept import-light for the parsers


def add_shrink_arguments(parser, *, who: str = "the pool backends") -> None:
    """``--shrink`` (the pool's shrink policy, pool/shrink_types.py) and ``--shrink-budget`` (bytes one shrink point
    may move) for ``who``."""
    parser.add_argument("--shrink", choices=SHRINK_MODES, default="off",
                        help=f"give slabs back for {who}: off (never: the origin design), release (drop the highest "
                             "all-free slabs), compact (also move live blocks down so slabs can go); default off")
    parser.add_argument("--shrink-budget", type=byte_size, default=None, metavar="BYTES",
                        help="bytes one shrink point (one step) may move, all layers: e.g. 16M (default 16M)")
