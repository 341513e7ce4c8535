"""HBars: a text histogram (one labelled horizontal bar per bucket) with one bucket highlighted (the worst case, in
bold: an extreme, not an error)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from app.tui.widgets.palette import HIGHLIGHT_STYLE


class HBars(Widget):
    """Labelled bars. ``show(title, [(label, value)], highlight=label)``; values are counts."""

    DEFAULT_CSS = "HBars { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._title = ""
        self._items: list[tuple[str, float]] = []
        self._highlight: str | None = None
        self._colour = "#3b9ae1"

    def show(self, title: str, items: list[tuple[str, float]], highlight: str | None = None,
             colour: str = "#3b9ae1") -> None:
        """Replace the histogram."""
        self._title, self._items, self._highlight, self._colour = title, items, highlight, colour
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self._items) + 1

    def render(self) -> Text:
        text = Text(self._title, style="bold", no_wrap=True, overflow="ellipsis")
        if not self._items:
            text.append("\n(no data yet)", style="dim")
            return text
        label_w = max(len(label) for label, _ in self._items)
        top = max(v for _, v in self._items) or 1
        bar_w = max(5, self.size.width - label_w - 12)
        for label, value in self._items:
            hot = label == self._highlight
            text.append(f"\n{label:>{label_w}} ", style=HIGHLIGHT_STYLE if hot else "")
            text.append("█" * max(1 if value else 0, round(bar_w * value / top)), style=self._colour)
            text.append(f" {value:g}" + ("  ◀ worst" if hot else ""), style=HIGHLIGHT_STYLE if hot else "")
        return text
