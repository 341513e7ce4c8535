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
