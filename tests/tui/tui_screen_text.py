"""Plain text of what an app's screen shows (for assertions on rendered content; no styles)."""

from __future__ import annotations


def screen_text(app) -> str:
    """Every line of the active screen as plain text, joined by newlines."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(strip.text.rstrip() for strip in strips)
