"""Runs tests/tui/tmux_check.sh and tmux_ranks.sh: the real app in a real terminal (tmux), checked through
capture-pane (a live run, replay and the inspector; a live distributed run, quit mid-run, its rank recordings
replayed as one run)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from tui_paths import HERE

pytestmark = pytest.mark.slow


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: the real-terminal check needs it")
def test_real_terminal_through_tmux():
    proc = subprocess.run(["bash", str(HERE / "tmux_check.sh")], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "ok: quit" in proc.stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: the real-terminal check needs it")
def test_live_distributed_run_through_tmux():
    proc = subprocess.run(["bash", str(HERE / "tmux_ranks.sh")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "ok: no process left" in proc.stdout and proc.stdout.rstrip().endswith("ok: quit")
