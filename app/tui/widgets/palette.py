"""Colours shared by the widgets. Mid-luminance hues chosen to stay readable on dark and light themes; state glyphs
carry the meaning too, so nothing depends on colour alone.

What a colour means (the same everywhere):

* ``ERROR_STYLE`` (red): something is wrong: a worker failed, a file is damaged, events were dropped, the footprint
  gate is exceeded. Nothing else is red.
* ``ATTENTION_STYLE`` (amber): a measured figure worth a look that is not a failure (a layer with no free run long
  enough for the next request).
* ``HIGHLIGHT_STYLE`` (bold, no hue): the extreme of a series (the peak, the worst sequence), a selection.
* ``OK_STYLE`` (green): explicitly fine (a gate met, a run done).
* ``NEUTRAL_STYLE`` (grey): not explained, not applicable, free, or a choice made by design (a gather decision
  below the fused kernel's threshold).

Healthy states (a full slab, memory MLX does not explain, the gather path) are never drawn in ``ERROR_STYLE``:
``tests/tui/test_first_screen.py`` renders every view of healthy runs and looks for it.
"""

from __future__ import annotations

from pool.units import format_bytes as human_bytes  # noqa: F401  (the one byte formatter, named for the views)

BACKEND_COLOURS = {"slab": "#3b9ae1", "dense": "#e8871e", "monolithic": "#c94bc9"}
EXTRA_BACKEND_COLOURS = ["#2aa876", "#8c7ae6", "#46a0b4", "#a3be8c", "#b48ead"]
SEQ_COLOURS = ["#17becf", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#46a0b4", "#f032e6", "#9a9a00",
               "#469990", "#9a6324", "#b03060", "#2e8b57"]
# Occupancy ramp, empty -> full (glyph, colour): one hue getting stronger; a full slab is good use of memory.
OCCUPANCY = [("·", "#7f7f7f"), ("▁", "#6fa8c7"), ("▂", "#5fa0c4"), ("▃", "#4f98c1"), ("▄", "#3f90be"),
             ("▅", "#3388bb"), ("▆", "#2a80b8"), ("▇", "#2278b4"), ("█", "#1a6fae")]
FREE_STYLE = "#7f7f7f"
SHARED_STYLE = "bold #d4a017"
HELD_STYLE = "italic #8c7ae6"
# weights, pool live, pool reserved-free, other active, MLX cache; then RSS that MLX does not explain (grey).
ACCOUNTING_COLOURS = ["#5b7db1", "#3b9ae1", "#8fc1e8", "#9a9a00", "#9b6fc4"]
UNEXPLAINED_COLOUR = "#8a8a8a"
ERROR_STYLE = "bold #d9573a"
WARN_STYLE = ERROR_STYLE  # the older name, kept for code that marks failures
ATTENTION_STYLE = "bold #c08a00"
HIGHLIGHT_STYLE = "bold"
OK_STYLE = "bold #2aa876"
NEUTRAL_STYLE = "#8a8a8a"
ERROR_HEXES = ("#d9573a", "#c0392b")  # what a rendering of a healthy state must not contain (tests)


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
