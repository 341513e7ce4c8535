"""Lane: one text line per key showing events over time (a mark per column where an event falls), e.g. fused-kernel
declines per layer, or phase names along the time axis."""

from __future__ import annotations

import math

from rich.text import Text
from textual.widget import Widget

LABEL_W = 9


class Lane(Widget):
    """Event lanes over [0, span]: ``show(span, {lane: [(t, mark, style)]}, cursor)``."""

    DEFAULT_CSS = "Lane { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._span = 1.0
        self._lanes: dict[str, list[tuple[float, str, str]]] = {}
        self._cursor: float | None = None

    def show(self, span: float, lanes: dict[str, list[tuple[float, str, str]]], cursor: float | None = None) -> None:
        """Replace the lanes; ``span`` is the time the full width stands for. A mark at a time that is not a
        finite number has no column: it is left out (readers refuse such times; this keeps the widget total)."""
        self._span = span if math.isfinite(span) and span > 1e-9 else 1e-9
        self._lanes = {name: [mark for mark in marks if math.isfinite(mark[0])] for name, marks in lanes.items()}
        self._cursor = cursor if cursor is not None and math.isfinite(cursor) else None
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self._lanes)) + 1

    def render(self) -> Text:
        width = max(10, self.size.width - LABEL_W)
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" " * LABEL_W + f"0s{'':{max(0, width - 10)}}{self._span:6.1f}s", style="dim")
        if not self._lanes:
            text.append("\n(no events)", style="dim")
        for name, events in self._lanes.items():
            cells: list[tuple[str, str]] = [("─", "dim")] * width
            for t, mark, style in events:  # a mark may be a word (a phase name): it runs on to the right
                col = min(width - 1, max(0, int(t / self._span * (width - 1))))
                for k, char in enumerate(mark[: width - col]):
                    cells[col + k] = (char, style)
            if self._cursor is not None:
                col = min(width - 1, max(0, int(self._cursor / self._span * (width - 1))))
                cells[col] = ("┃", "bold reverse")
            text.append(f"\n{name[:LABEL_W - 1]:<{LABEL_W}}")
            for mark, style in cells:
                text.append(mark, style=style)
        return text
