"""AccountingBar: one stacked horizontal bar per backend splitting its footprint (max(active + cache) at the cursor)
into weights, pool live, pool reserved-free, other active and MLX cache, then the memory MLX does not explain:
RSS beyond MLX's figures (unified memory), or on a discrete GPU the host RSS, which is not GPU memory.

No negative memory is drawn. The parts come from ``probes.sampler.accounting_parts``; "other active" is what is
left of MLX's active memory after the weights and the pool's own bookkeeping, and it goes below zero when that
bookkeeping counts bytes MLX does not hold (slabs booked but not allocated yet, weights freed at the end). Such a
remainder is drawn as zero and said in words, in a neutral colour: it is what is not explained, not an error.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from app.tui.analysis import AccountingPart
from app.tui.widgets.glossary_link import glossary_link
from app.tui.widgets.palette import ACCOUNTING_COLOURS, NEUTRAL_STYLE, UNEXPLAINED_COLOUR, human_bytes

NAME_WIDTH = 11
FOOTPRINT_PARTS = 5  # the first five parts sum to the footprint; the sixth is the RSS MLX does not explain
BOOKED_PART = 3  # "other active": the remainder that goes negative when the bookkeeping exceeds MLX's active


def bar_rows(parts: list[AccountingPart]) -> tuple[list[float], float, float, str]:
    """(drawn bytes of the footprint's parts, none below zero; the footprint; booked-over bytes (how far the
    bookkeeping exceeds MLX's active, 0 if it does not); the unexplained part's label) for one sample's parts."""
    footprint = sum(p.bytes for p in parts[:FOOTPRINT_PARTS])
    drawn = [max(0.0, p.bytes) for p in parts[:FOOTPRINT_PARTS]]
    over = max(0.0, -parts[BOOKED_PART].bytes) if len(parts) > BOOKED_PART else 0.0
    return drawn, footprint, over, parts[FOOTPRINT_PARTS].label if len(parts) > FOOTPRINT_PARTS else ""


class AccountingBar(Widget):
    """Stacked bars, one line per backend (plus a note line where the bookkeeping exceeds MLX's active memory),
    and a legend line. Owns the rows given to ``show``."""

    DEFAULT_CSS = "AccountingBar { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[tuple[str, list[AccountingPart]]] = []

    def show(self, rows: list[tuple[str, list[AccountingPart]]]) -> None:
        """Replace the bars: (backend name, parts) per backend."""
        self._rows = rows
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        notes = sum(1 for _, parts in self._rows if bar_rows(parts)[2] > 0)
        return len(self._rows) + notes + 1

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        scale = max((sum(bar_rows(parts)[0]) + max(0.0, parts[-1].bytes) for _, parts in self._rows), default=0.0)
        bar_width = max(10, self.size.width - NAME_WIDTH - 48)
        for name, parts in self._rows:
            drawn, footprint, over, unexplained = bar_rows(parts)
            text.append(f"{name[:NAME_WIDTH - 1]:<{NAME_WIDTH}}")
            for colour, value in zip(ACCOUNTING_COLOURS, drawn):
                text.append("█" * (round(bar_width * value / scale) if scale else 0), style=colour)
            rest = max(0.0, parts[-1].bytes) if len(parts) > FOOTPRINT_PARTS else 0.0
            text.append("░" * (round(bar_width * rest / scale) if scale else 0), style=UNEXPLAINED_COLOUR)
            text.append(f" act+cache {human_bytes(footprint)}")
            if unexplained:
                text.append(f" + {unexplained} {human_bytes(rest)}", style=NEUTRAL_STYLE)
            if over > 0:
                text.append(f"\n{'':{NAME_WIDTH}}weights + pool count {human_bytes(over)} more than MLX holds "
                            "active (not allocated yet, or freed): other active drawn as 0", style=NEUTRAL_STYLE)
            text.append("\n")
        text.append_text(glossary_link("memory"))
        text.append("  ")
        if self._rows:
            for colour, part in zip(ACCOUNTING_COLOURS, self._rows[0][1]):
                text.append("█ ", style=colour)
                text.append(f"{part.label}  ")
            last = self._rows[0][1][FOOTPRINT_PARTS:]
            if last:
                text.append("░ ", style=UNEXPLAINED_COLOUR)
                text.append(last[0].label, style=NEUTRAL_STYLE)
        else:
            text.append("no samples yet", style="dim")
        return text
