"""The dashboard's keys: the bindings, what the help screen says about each, and which keys act on a live run only.

The footer shows the keys a user needs on every screen (help, glossary, a new run, play/pause, step, peak, quit)
and, during a live run, stop and record, short enough to fit 80 columns; the rest are listed by ``?``. Keys that act on a live run only (``x``, ``R``, ``L``) are
hidden from the footer in replay, and pressing one there says why it does nothing (``LIVE_ONLY``).
"""

from __future__ import annotations

from textual.binding import Binding

STEP = Binding.Group("step")
TAB_KEYS = ("memory", "Memory"), ("slabs", "Slabs"), ("frag", "Fragmentation"), ("gather", "Gather"), \
    ("fused", "Fused"), ("inspect", "Inspector")

# action -> what pressing its key in replay (or with no live run) says instead
LIVE_ONLY = {
    "stop_run": "x stops a live run; this is a replay (n starts a live run)",
    "toggle_record": "R records a live run; this is a replay of recordings already saved (n starts a live run)",
    "go_live": "L returns to following a live run; this is a replay (n starts a live run)",
}

BINDINGS = [
    Binding("question_mark", "help", "help"),
    Binding("g", "glossary", "glossary"),
    Binding("n", "new_run", "new"),
    Binding("x", "stop_run", "stop"),
    Binding("x", "explain_live_only('stop_run')", "stop", show=False),
    Binding("space", "toggle_pause", "play", key_display="␣"),
    Binding("R", "toggle_record", "record"),
    Binding("R", "explain_live_only('toggle_record')", "record", show=False),
    Binding("left_square_bracket", "step(-1)", "back", group=STEP),
    Binding("right_square_bracket", "step(1)", "fwd", group=STEP),
    Binding("P", "jump_peak", "peak"),
    Binding("L", "go_live", "live", show=False),
    Binding("L", "explain_live_only('go_live')", "live", show=False),
    Binding("t", "cycle_x", "x axis", show=False),
    Binding("b", "cycle_pool", "pool backend", show=False),
    Binding("w", "cycle_rank", "rank", show=False),
    Binding("D", "toggle_theme", "dark/light", show=False),
    Binding("s", "show_tab('sessions')", "sessions", show=False),
    *[Binding(str(i + 1), f"show_tab('{tab}')", title, show=False) for i, (tab, title) in enumerate(TAB_KEYS)],
    Binding("7", "show_tab('sessions')", "Sessions", show=False),
    Binding("8", "show_tab('ranks')", "Ranks", show=False),
    Binding("q", "quit", "quit"),
]

LONG_HELP = {  # action -> what the help screen says (the footer keeps the short description)
    "glossary": "what every figure and word on screen means (also: click 'g glossary' in any view's legend)",
    "new_run": "new live run: form for scenario, model, backends, block size, slab size, gate",
    "stop_run": "live run only: stop it (the workers are told to stop; the status then says 'stopped')",
    "toggle_pause": "live: pause / resume the view (workers keep running); replay: play / pause",
    "toggle_record": "live run only: start / stop recording it (one session file per backend)",
    "step(-1)": "cursor one pool snapshot back (pauses a live view)",
    "step(1)": "cursor one pool snapshot forward",
    "jump_peak": "jump to the moment of peak footprint, max(active+cache)",
    "go_live": "live run only: back to following live data after pausing",
    "cycle_x": "memory x axis: time / decode step / tokens",
    "cycle_pool": "which pool session the pool views show (slab / monolithic / a rank)",
    "cycle_rank": "pool views: the next rank of a distributed run (same aligned instant)",
    "toggle_theme": "dark / light theme",
}


def help_bindings() -> list[Binding]:
    """The app's bindings as the help screen lists them: one row per key (not the replay explanations)."""
    return [b for b in BINDINGS if not b.action.startswith("explain_live_only")]


class LiveOnlyKeys:
    """Mixed into ``SlabscopeApp``: its ``mode`` (the footer's keys follow it) and which keys act in it."""

    @property
    def mode(self) -> str:
        """LIVE (following a live run) | PAUSED (a live run, the view held) | REPLAY | IDLE (nothing on screen)."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value != self._mode:
            self._mode = value
            self.refresh_bindings()  # the live-only keys appear or leave the footer

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Live-only keys (``LIVE_ONLY``) act in a live run only; elsewhere they leave the footer and their key
        falls through to ``explain_live_only``, which says why."""
        live = self._mode in ("LIVE", "PAUSED")
        if action in LIVE_ONLY:
            return live and (action != "go_live" or self._mode == "PAUSED")
        if action == "explain_live_only":
            return not live or (parameters == ("go_live",) and self._mode == "LIVE")
        return True

    def action_explain_live_only(self, action: str) -> None:
        if action == "go_live" and self._mode == "LIVE":
            self.notify("already following the live run (L returns to it after space, [ or ])")
        elif self._mode == "REPLAY":
            self.notify(LIVE_ONLY[action])
        else:
            self.notify(LIVE_ONLY[action].split(";")[0] + "; there is none now (n starts one)")
