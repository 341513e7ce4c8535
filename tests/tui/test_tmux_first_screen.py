"""Runs tests/tui/tmux_first_screen.sh: the README's replay command at 160x48 (the whole-run verdict), and a live run
at 80x24 (progress from launch, finished only at the end, x reads stopped), in a real terminal (tmux)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from tui_paths import HERE

pytestmark = pytest.mark.slow


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: the real-terminal check needs it")
def test_first_screen_and_live_progress_through_tmux():
    proc = subprocess.run(["bash", str(HERE / "tmux_first_screen.sh")], capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "ok: no EXCEEDED" in proc.stdout and "ok: LIVE (stopped)" in proc.stdout
    assert proc.stdout.rstrip().endswith("ok: quit")
