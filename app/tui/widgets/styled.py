"""Building long single-line rich Text cheaply: consecutive characters with the same style become one span.

A 64-slab x 32-row layer drawn one character per row is 2k characters; most neighbours share a style (same owner,
runs of free rows), so coalescing cuts the spans Textual must convert per refresh by an order of magnitude."""

from __future__ import annotations

from rich.text import Text


class SpanBuffer:
    """Accumulates (chars, style) and flushes a run into ``text`` whenever the style changes."""

    __slots__ = ("text", "_chars", "_style")

    def __init__(self, text: Text) -> None:
        self.text = text
        self._chars: list[str] = []
        self._style = ""

    def add(self, chars: str, style: str) -> None:
        if style != self._style and self._chars:
            self.flush()
        self._style = style
        self._chars.append(chars)

    def flush(self) -> None:
        if self._chars:
            self.text.append("".join(self._chars), style=self._style or None)
            self._chars = []
