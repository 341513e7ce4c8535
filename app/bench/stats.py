"""The one summary every ``slabscope bench`` figure gets on a shared machine: median and range over rounds."""

from __future__ import annotations

import statistics


def spread(values: list[float]) -> dict:
    """{"median", "min", "max"} of ``values`` (at least one)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}
