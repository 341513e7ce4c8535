"""The one summary every ``slabscope bench`` figure gets on a shared machine: median and range over rounds."""

from __future__ import annotations

import statistics


def spread(values: list[float]) -> dict:
    """{"median", "min", "max"} of ``values`` (at least one)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def spread_by_field(rows: list[dict], fields) -> dict:
    """{field: {"median", "min", "max", "n"}} over ``rows``: the rows holding a value (not None) for the field;
    a field no row holds is left out."""
    out = {}
    for field in fields:
        values = [row[field] for row in rows if row.get(field) is not None]
        if values:
            out[field] = {**spread(values), "n": len(values)}
    return out
