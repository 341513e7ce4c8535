"""AccountingBar: one stacked horizontal bar per backend splitting its memory into weights, pool live, pool
reserved-free, other active, MLX cache and the RSS MLX does not explain (host RSS on a discrete CUDA GPU) (nothing hidden: the parts sum to the bar's total)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from app.tui.analysis import AccountingPart
from app.tui.widgets.palette import ACCOUNTING_COLOURS, WARN_STYLE, human_bytes

NAME_WIDTH = 11


class AccountingBar(Widget):
    """Stacked bars, one line per backend, plus a legend line. Owns the rows given to ``show``."""

    DEFAULT_CSS = "AccountingBar { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[tuple[str, list[AccountingPart]]] = []

    def show(self, rows: list[tuple[str, list[AccountingPart]]]) -> None:
        """Replace the bars: (backend name, parts) per backend."""
        self._rows = rows
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self._rows) + 1

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        scale = max((sum(max(0.0, p.bytes) for p in parts) for _, parts in self._rows), default=0.0)
        bar_width = max(10, self.size.width - NAME_WIDTH - 12)
        for name, parts in self._rows:
            total = sum(max(0.0, p.bytes) for p in parts)
            text.append(f"{name[:NAME_WIDTH - 1]:<{NAME_WIDTH}}")
            for colour, part in zip(ACCOUNTING_COLOURS, parts):
                cells = round(bar_width * max(0.0, part.bytes) / scale) if scale else 0
                text.append("█" * cells, style=colour)
            text.append(f" {human_bytes(total)}")
            for part in parts:  # a negative part means double counting or non-resident memory: shown, not hidden
                if part.bytes < 0:
                    text.append(f"  {part.label} {human_bytes(part.bytes)}", style=WARN_STYLE)
            text.append("\n")
        if self._rows:
            labels = [p.label for p in self._rows[0][1]]
            for colour, label in zip(ACCOUNTING_COLOURS, labels):
                text.append("█ ", style=colour)
                text.append(f"{label}  ")
        else:
            text.append("no samples yet", style="dim")
        return text
