"""Glossary screen: what every figure and word on the dashboard means (``app.tui.glossary``), one section per view,
opened scrolled to the section of the view it was opened from. Escape, q or g closes it."""

from __future__ import annotations

import re

from rich.markup import escape
from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from app.tui.glossary import TOPICS


def topic_table(title: str, terms: list[tuple[str, str]]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", expand=True, show_edge=False)
    table.add_column("term", style="bold", no_wrap=True, max_width=30)
    table.add_column("meaning")
    for term, meaning in terms:
        table.add_row(escape(term), re.sub(r"`([^`]+)`", r"[b]\1[/b]", escape(meaning)))
    return table


class GlossaryScreen(ModalScreen[None]):
    """Modal glossary; ``topic`` (a view's tab id) is the section shown first."""

    BINDINGS = [Binding("escape,q,g", "dismiss", "close")]

    def __init__(self, topic: str = "") -> None:
        super().__init__()
        self.topic = topic

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="glossary-body"):
            yield Static("[b]slabscope glossary[/b]  (escape, q or g closes; ? lists the keys)", id="glossary-title")
            for topic, title, terms in TOPICS:
                yield Static(topic_table(title, terms), id=f"glossary-{topic}")

    def on_mount(self) -> None:
        self.call_after_refresh(self._show_topic)

    def _show_topic(self) -> None:
        section = self.query(f"#glossary-{self.topic}") if self.topic else None
        if section:
            self.query_one("#glossary-body", VerticalScroll).scroll_to_widget(section.first(), animate=False,
                                                                              top=True)

    def action_dismiss(self) -> None:
        self.dismiss(None)
