"""The Memory view's two header lines: the whole-run verdict (what ``slabscope compare`` prints for the same
sessions: each pool session's footprint ratio to its dense baseline against the gate, and tok/s with its kind) and
the same figures at the cursor, labelled "at cursor" in a neutral colour (a peak up to an instant is no verdict).

Every figure comes from ``probes.figures`` (one definition per figure); this module only lays them out.
"""

from __future__ import annotations

from rich.text import Text

from app.tui.data import ViewState
from app.tui.widgets.palette import ERROR_STYLE, NEUTRAL_STYLE, OK_STYLE, backend_colour
from probes import figures
from probes.figures import SO_FAR, WHOLE_RUN, gate_verdict
from probes.store import SessionModel

GAUGE_MIN_WIDTH = 120  # narrower terminals show the verdict without the small gauge


def ratio_gauge(value: float, gate: float, width: int = 8) -> Text:
    """A small bar from 0.5x to 1.5x (wider when the gate is above that) with the gate drawn as ┃ (no spaces in
    it: a line that wraps never breaks a gauge)."""
    top = max(1.5, gate * 1.1, min(value, 3.0))
    pos = lambda r: min(width - 1, max(0, int((r - 0.5) / (top - 0.5) * (width - 1))))  # noqa: E731
    fill, mark = pos(value), pos(gate)
    style = OK_STYLE if value <= gate else ERROR_STYLE
    text = Text("▕")
    for i in range(width):
        text.append("┃" if i == mark else "█" if i <= fill else "·", style="bold" if i == mark else style)
    text.append("▏")
    return text


def _pairs(frame: ViewState) -> list[tuple[SessionModel, SessionModel]]:
    """(session, its dense baseline) for every session that has one (a rank: the same rank of the dense run)."""
    out = []
    for model in frame.sessions.sessions.values():
        base = frame.sessions.baseline_of(model)
        if base is not None and base is not model:
            out.append((model, base))
    return out


def _append_rates(text: Text, frame: ViewState, until) -> None:
    """Busy tok/s per session (``probes.figures.tok_s``, printed by ``format_tok_s`` as ``compare`` prints it) over
    its whole run or up to ``until(model)``."""
    for index, model in enumerate(frame.sessions.sessions.values()):
        rate = figures.tok_s(model, "busy", None, until(model))
        text.append(f" {model.label} ", style=backend_colour(model.label, index))
        text.append(figures.format_tok_s(rate))


def verdict_line(frame: ViewState, width: int = 160) -> Text:
    """'whole run: slab/dense 0.54x (gate 1.15x ok)  busy tok/s slab 13,115.2 ...':
    every session's footprint ratio over its whole run (a live run: so far), as ``compare`` prints it."""
    sessions = list(frame.sessions.sessions.values())
    scope = WHOLE_RUN if sessions and all(m.complete for m in sessions) else SO_FAR
    text = Text()  # wraps (between sessions) where the terminal is narrow
    text.append(f"{scope}: ", style="bold")
    pairs = _pairs(frame)
    peaks: dict[int, float | None] = {}  # one pass over a baseline's samples per line
    for model, base in pairs:
        if id(base) not in peaks:
            peaks[id(base)] = figures.peak_footprint(base)
        verdict = gate_verdict(figures.footprint_ratio(figures.peak_footprint(model), peaks[id(base)]), frame.gate)
        text.append(f"{model.label}/{base.label} ", style="bold")
        if verdict is None:
            text.append("-  ", style=NEUTRAL_STYLE)
            continue
        if width >= GAUGE_MIN_WIDTH:
            text.append_text(ratio_gauge(verdict.ratio, verdict.gate))
        style = OK_STYLE if verdict.ok else ERROR_STYLE
        text.append(figures.format_ratio(verdict.ratio), style=style)
        text.append(f" (gate {verdict.gate:.2f}x {verdict.word})  ", style=NEUTRAL_STYLE if verdict.ok else style)
    if not pairs:
        text.append("footprint ratio needs a dense session and another one  ", style=NEUTRAL_STYLE)
    text.append(figures.LABELS["tok_s:busy"], style="bold")
    _append_rates(text, frame, lambda model: None)
    return text


def cursor_line(frame: ViewState) -> Text:
    """The same figures from each session's start up to the cursor, labelled "at cursor" (neutral: no gate)."""
    text = Text(style=NEUTRAL_STYLE)
    if frame.cursor is None:
        text.append("at cursor: following live data (space pauses, [ ] steps, P jumps to the peak)")
        return text
    text.append(f"at cursor t={frame.cursor:.1f}s (peaks since start): ")
    for model, base in _pairs(frame):
        value = figures.footprint_ratio(figures.peak_footprint(model, None, frame.cursor_in(model)),
                                        figures.peak_footprint(base, None, frame.cursor_in(base)))
        text.append(f"{model.label}/{base.label} {figures.format_ratio(value)}  ")
    text.append(figures.LABELS["tok_s:busy"])
    _append_rates(text, frame, frame.cursor_in)
    return text
