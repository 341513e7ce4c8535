"""StatusBar: mode (LIVE / PAUSED / REPLAY), cursor, each backend's state (running, done, or its error), the
recording indicator, and the probes' own overhead and dropped batches as reported by the sessions."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from app.tui.data import Store
from app.tui.widgets.palette import OK_STYLE, WARN_STYLE, backend_colour

STATE_MARK = {"running": ("●", OK_STYLE), "done": ("✓", OK_STYLE), "error": ("✗", WARN_STYLE),
              "waiting": ("…", "dim")}


class StatusBar(Widget):
    """One line at the bottom, rebuilt on every refresh tick."""

    DEFAULT_CSS = "StatusBar { height: 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._text = Text("starting…")

    def show(self, store: Store, mode: str, cursor: float | None, recording: str | None) -> None:
        """Rebuild the line from the store and the app's mode."""
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f" {mode} ", style="bold reverse")
        if cursor is not None:
            text.append(f" t={cursor:.1f}s")
        for index, track in enumerate(store.tracks.values()):
            mark, style = STATE_MARK[track.status]
            text.append("  ")
            text.append(track.name, style=f"bold {backend_colour(track.name, index)}")
            text.append(f" {mark}", style=style)
            if track.error:
                text.append(f" {track.error[:60]}", style=WARN_STYLE)
        if recording:
            text.append("  ⏺ REC", style=WARN_STYLE)
        overheads = [f"{t.name} {t.probe_overhead()}" for t in store.tracks.values() if t.probe_overhead()]
        text.append("  probes: " + (", ".join(overheads) if overheads else "overhead n/a"), style="dim")
        dropped = sum(t.dropped_batches for t in store.tracks.values())
        if dropped:
            text.append(f"  dropped {dropped}", style=WARN_STYLE)
        self._text = text
        self.refresh()

    def render(self) -> Text:
        return self._text
