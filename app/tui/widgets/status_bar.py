"""StatusBar: mode (LIVE / PAUSED / REPLAY), cursor, each backend's state (running, done, stopped, or its error; a
server's requests in flight and done) and, while a live run goes on, where it is (``probes.progress``: starting,
loading model, rehearsal, phase, requests k/N, tokens, estimated time left), the recording indicator, and the probes'
own overhead and dropped batches as reported by the sessions."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from app.tui.data import SessionSet
from app.tui.widgets.palette import ERROR_STYLE, NEUTRAL_STYLE, OK_STYLE, WARN_STYLE, backend_colour
from probes.events import RequestArrived, RequestDone

STATE_MARK = {"running": ("●", OK_STYLE), "done": ("✓", OK_STYLE), "error": ("✗", ERROR_STYLE),
              "waiting": ("○", "dim"), "damaged": ("⚠ damaged file", ERROR_STYLE), "stopped": ("■ stopped", NEUTRAL_STYLE)}


def live_progress(model) -> str | None:
    """Where a session still running is (a live run's worker, a recording still being written: a rank of a live
    distributed run), for the status bar; None once it has ended."""
    if model.status == "waiting":
        return "starting worker…"
    if model.status != "running" or not getattr(model, "growing", model.source == "live"):
        return None
    return model.progress.short_text()


RECENT_REQUESTS = 10_000  # arrivals and finishes looked at for the in-flight count (a refresh stays cheap)


def request_counts(model) -> tuple[int, int] | None:
    """(requests in flight, requests finished) of a server's session (``slabscope serve``: RequestArrived events);
    None for a scenario run. In flight: the recent arrivals not finished yet (by request id)."""
    arrived = model.events_of(RequestArrived)
    if not arrived:
        return None
    done = model.events_of(RequestDone)
    finished = {e.req_id for e in done[-RECENT_REQUESTS:]}
    return sum(e.req_id not in finished for e in arrived[-RECENT_REQUESTS:]), len(done)


class StatusBar(Widget):
    """One line at the bottom, rebuilt on every refresh tick."""

    DEFAULT_CSS = "StatusBar { height: 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._text = Text("starting…")

    def show(self, sessions: SessionSet, mode: str, cursor: float | None, recording: str | None) -> None:
        """Rebuild the line from the sessions on screen and the app's mode."""
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f" {mode} ", style="bold reverse")
        if cursor is not None:
            text.append(f" t={cursor:.1f}s")
        for index, model in enumerate(sessions.sessions.values()):
            mark, style = STATE_MARK[model.status]
            text.append("  ")
            text.append(model.label, style=f"bold {backend_colour(model.label, index)}")
            text.append(f" {mark}", style=style)
            requests = request_counts(model)
            if requests is not None:  # a server's session: its requests as they arrive and finish
                text.append(f" ⇢{requests[0]} in flight, {requests[1]} done", style="bold")
            progress = live_progress(model)
            if progress:
                text.append(f" {progress}")
            if model.status == "error":
                text.append(f" {model.error.text[:60]}", style=WARN_STYLE)
        if recording:
            text.append("  ⏺ REC", style="bold reverse")
        overheads = [f"{m.label} {100 * m.overhead.cost_fraction:.2f}%" for m in sessions.sessions.values()
                     if m.overhead is not None]
        text.append("  probes: " + (", ".join(overheads) if overheads else "overhead n/a"), style="dim")
        dropped = sum(m.dropped_batches for m in sessions.sessions.values())
        if dropped:
            text.append(f"  dropped {dropped}", style=WARN_STYLE)
        self._text = text
        self.refresh()

    def render(self) -> Text:
        return self._text
