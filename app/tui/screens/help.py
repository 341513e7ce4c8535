"""Help screen: every key the app and its views understand, built from the live bindings (never out of date), and the
way to the glossary (``g``: what every figure and word means)."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

EXTRA_KEYS = [
    ("mouse", "click tabs, table rows, slab lines in the inspector; click/drag the scrubber to seek"),
    ("↑ ↓ (inspector map)", "previous / next slab"),
    ("← → (scrubber)", "seek back / forward 1% of the run"),
    ("+ - ← → ↑ ↓ r (plot)", "zoom, pan and reset the memory plot when it has focus"),
]


class HelpScreen(ModalScreen[None]):
    """Modal list of keys. Escape, q or ? closes it."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close"), Binding("g", "glossary", "glossary")]

    def __init__(self, sections: list[tuple[str, list[Binding]]], long_help: dict[str, str] | None = None) -> None:
        super().__init__()
        self.sections = sections
        self.long_help = long_help or {}

    def compose(self) -> ComposeResult:
        table = Table(title="slabscope keys", expand=True, show_edge=False)
        table.add_column("where", style="dim", no_wrap=True)
        table.add_column("key", style="bold", no_wrap=True)
        table.add_column("does")
        for where, bindings in self.sections:
            for b in bindings:
                table.add_row(where, _key_label(b.key), self.long_help.get(b.action, b.description or b.action))
        for key, does in EXTRA_KEYS:
            table.add_row("anywhere", key, does)
        with VerticalScroll(id="help-body"):
            yield Static("[b]g[/b]: the glossary, what every figure and word on screen means "
                         "([@click=screen.glossary]open it[/])", id="help-glossary")
            yield Static(table)

    def action_dismiss(self) -> None:
        self.dismiss(None)

    def action_glossary(self) -> None:
        """Close the help and open the glossary (at the visible view's terms)."""
        app = self.app
        self.dismiss(None)
        app.call_later(app.action_glossary)


def _key_label(key: str) -> str:
    names = {"question_mark": "?", "left_square_bracket": "[", "right_square_bracket": "]", "space": "space",
             "less_than_sign": "<", "greater_than_sign": ">", "comma": ",", "full_stop": "."}
    return " / ".join(names.get(k, k) for k in key.split(","))
