"""The "g glossary" link every view's legend carries: clicked, it opens the glossary at that view's terms (the key
``g`` does the same from anywhere)."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text


def glossary_link(topic: str) -> Text:
    """'g glossary' as a clickable span opening the glossary at ``topic`` (a view's tab id)."""
    text = Text()
    text.append("g glossary", style=Style(bold=True, underline=True, meta={"@click": f"app.glossary('{topic}')"}))
    return text
