"""The Fragmentation view's trend column is on the index's fixed 0..1 scale (Textual's Sparkline rescales each
series to its own range, which is why it is not used: app/tui/views/fragmentation.py)."""

from app.tui.views.fragmentation import sparkline


def test_a_low_flat_trend_stays_low_and_one_healthy_point_is_empty():
    assert sparkline([0.02, 0.02, 0.03]) == "▁▁▁" and sparkline([0.0]) == "▁"
    assert sparkline([0.0, 0.5, 1.0]) == "▁▄█"
