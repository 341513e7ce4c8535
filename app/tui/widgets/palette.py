"""Colours shared by the widgets. Mid-luminance hues chosen to stay readable on dark and light themes; state glyphs
carry the meaning too, so nothing depends on colour alone."""

from __future__ import annotations

from pool.units import format_bytes as human_bytes  # noqa: F401  (the one byte formatter, named for the views)

BACKEND_COLOURS = {"slab": "#3b9ae1", "dense": "#e8871e", "monolithic": "#c94bc9"}
EXTRA_BACKEND_COLOURS = ["#2aa876", "#d64550", "#8c7ae6"]
SEQ_COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#46a0b4", "#f032e6", "#9a9a00",
               "#469990", "#9a6324", "#b03060", "#2e8b57"]
# Occupancy ramp, empty -> full (glyph, colour).
OCCUPANCY = [("·", "#7f7f7f"), ("▁", "#4c9f70"), ("▂", "#4c9f70"), ("▃", "#7fb24c"), ("▄", "#b8b83a"),
             ("▅", "#d9a23a"), ("▆", "#e07b39"), ("▇", "#d9573a"), ("█", "#c0392b")]
FREE_STYLE = "#7f7f7f"
SHARED_STYLE = "bold #d4a017"
HELD_STYLE = "italic #8c7ae6"
CALLER_STYLE = "italic #46a0b4"
ACCOUNTING_COLOURS = ["#5b7db1", "#3b9ae1", "#8fc1e8", "#9a9a00", "#e8871e", "#c0392b"]
WARN_STYLE = "bold #d9573a"
OK_STYLE = "bold #2aa876"


def backend_colour(name: str, index: int = 0) -> str:
    """Colour of a backend's series (known backends fixed; others cycle)."""
    base = name.split(":")[0].split("@")[0]
    return BACKEND_COLOURS.get(base, EXTRA_BACKEND_COLOURS[index % len(EXTRA_BACKEND_COLOURS)])


def seq_colour(seq: int) -> str:
    """Colour of a sequence id (stable across views)."""
    return SEQ_COLOURS[seq % len(SEQ_COLOURS)]


def occupancy_glyph(fraction: float) -> tuple[str, str]:
    """Glyph and colour for a slab's fill fraction (0 only when empty, full glyph only when full)."""
    if fraction <= 0:
        return OCCUPANCY[0]
    if fraction >= 1:
        return OCCUPANCY[-1]
    idx = 1 + int(fraction * (len(OCCUPANCY) - 2))
    return OCCUPANCY[min(idx, len(OCCUPANCY) - 2)]
