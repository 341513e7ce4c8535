"""Scrubber: a one-line time bar for replay; click or drag to seek, left/right when focused."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget


class Scrubber(Widget, can_focus=True):
    """Shows ``position`` within ``duration`` and posts ``Scrubber.Seek`` when the user moves it."""

    DEFAULT_CSS = "Scrubber { height: 1; }"
    BINDINGS = [Binding("left", "nudge(-1)", "back", show=False), Binding("right", "nudge(1)", "fwd", show=False)]

    class Seek(Message):
        """The user asked to move the cursor to ``t`` seconds."""

        def __init__(self, t: float) -> None:
            super().__init__()
            self.t = t

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.duration = 0.0
        self.position: float | None = None
        self.peak: float | None = None

    def show(self, duration: float, position: float | None, peak: float | None) -> None:
        """Update the bar (position None = live, shown at the end)."""
        self.duration, self.position, self.peak = duration, position, peak
        self.refresh()

    def _bar_width(self) -> int:
        return max(4, self.size.width - 18)

    def render(self) -> Text:
        width = self._bar_width()
        pos = self.duration if self.position is None else self.position
        frac = pos / self.duration if self.duration > 0 else 1.0
        head = min(width - 1, int(frac * (width - 1)))
        bar = ["━" if i < head else "─" for i in range(width)]
        if self.peak is not None and self.duration > 0:
            bar[min(width - 1, int(self.peak / self.duration * (width - 1)))] = "▲"
        bar[head] = "●"
        text = Text(no_wrap=True)
        text.append("".join(bar[:head]), style="bold")
        text.append(bar[head], style="bold reverse")
        text.append("".join(bar[head + 1:]), style="dim")
        label = "live" if self.position is None else f"{pos:6.1f}s"
        text.append(f" {label}/{self.duration:5.1f}s")
        return text

    def _seek_to_column(self, x: int) -> None:
        width = self._bar_width()
        if self.duration > 0:
            self.post_message(self.Seek(max(0.0, min(1.0, x / max(1, width - 1))) * self.duration))

    def on_click(self, event: events.Click) -> None:
        self._seek_to_column(event.x)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        if event.button == 1:
            self._seek_to_column(event.x)

    def action_nudge(self, direction: int) -> None:
        pos = self.duration if self.position is None else self.position
        self.post_message(self.Seek(max(0.0, min(self.duration, pos + direction * max(0.1, self.duration / 100)))))
