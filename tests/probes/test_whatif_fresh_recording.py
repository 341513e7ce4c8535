"""``whatif --shrink compact|release`` on a recording made just now by ``slabscope record`` (CPU, the slab backend
with its defaults: shrink off, so open blocks "high" and a burst's prefill parks rows). The what-if's compaction used
to refuse it ("shrink plan out of date: layer 0 move 31 -> 4"): its plan counted parked rows as destinations, its
execution skipped them (pool fix and white-box test: tests/pool/test_shrink_parked_rows.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fresh_churn(tmp_path_factory) -> Path:
    """A churn recording of the slab backend on the tiny synthetic model (a couple of seconds on the CPU)."""
    out = tmp_path_factory.mktemp("fresh")
    subprocess.run([sys.executable, "-m", "app", "record", "--model", "synthetic:tiny-llama", "--scenario", "churn",
                    "--set", "n=6", "--set", "prompt_max=256", "--set", "gen_max=16", "--backends", "slab",
                    "--out", str(out)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    return out / "churn-slab.slabrec"


def test_the_fresh_recording_parks_rows(fresh_churn):
    """The case the fix is about: the recording's pool is "high" and the replay parks rows before a shrink point."""
    from pool.ops import ShrinkTick
    from probes.replay import Session
    from probes.whatif import Replay, replay_config

    session = Session.open(fresh_churn)
    base, cfg = replay_config(session, shrink="compact")
    assert base.open_blocks == "high" and base.shrink.mode == "off"
    replay, parked_at_shrink = Replay(cfg, base), 0
    for entry in session.all_ops():
        if isinstance(entry.op, ShrinkTick):
            parked_at_shrink += len(replay.bookkeeping.free.parked_rows())
        replay.step(entry)
    assert parked_at_shrink > 0


@pytest.mark.parametrize("mode", ["compact", "release"])
def test_whatif_shrink_runs_on_a_fresh_recording_with_the_default_budget(fresh_churn, cli, mode):
    code, out, err = cli(["whatif", str(fresh_churn), "--shrink", mode, "--json"])
    assert code == 0 and err == []
    report = json.loads(out)
    assert report["recorded_replay_mismatches"] == [] and report["skipped_ops"] == []
    whatif, recorded = report["whatif"], report["recorded"]
    assert whatif["config"]["shrink"] == mode and whatif["shrink_points"] > 0
    assert whatif["slab_releases"] > 0 and whatif["final_bytes_reserved"] < recorded["final_bytes_reserved"]
    if mode == "compact":
        assert whatif["blocks_moved"] > 0


def test_the_compacting_replay_keeps_its_book_whole(fresh_churn):
    from probes.replay import Session
    from probes.whatif import Replay, replay_config

    session = Session.open(fresh_churn)
    base, cfg = replay_config(session, shrink="compact")
    replay = Replay(cfg, base)
    for entry in session.all_ops():
        replay.step(entry)
        replay.bookkeeping.check_integrity()
    assert replay.bookkeeping.counters.blocks_moved > 0
