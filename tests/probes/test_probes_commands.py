"""CLI: compare gates and their exit codes, whatif/report on recorded sessions, mlx-free imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.cli import main as cli_main
from probes_scripted import record_scripted

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp")
    paths = []
    for design, slab_blocks in (("slab", 4), ("monolithic", 4)):
        path = out / f"scripted-{design}.slabrec"
        record_scripted(path, design=design, slab_blocks=slab_blocks, steps=50, seed=5)
        paths.append(str(path))
    return paths


def test_compare_table_and_json(sessions, capsys):
    assert cli_main(["compare", *sessions]) == 0
    text = capsys.readouterr().out
    assert "max(act+cache) MiB" in text and "slab" in text and "monolithic" in text
    assert cli_main(["compare", *sessions, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(r["session"], r["phase"]): r for r in data["rows"]}
    # the first session is the baseline (no dense here): compared with nothing, it carries no ratio
    assert rows[("slab", "all")]["footprint_ratio"] is None and rows[("slab", "all")]["is_baseline"]
    assert rows[("monolithic", "all")]["footprint_ratio"] > 0 and not rows[("monolithic", "all")]["is_baseline"]
    assert rows[("slab", "all")]["mean_runs"] >= 1.0 and rows[("monolithic", "all")]["max_runs"] == 1
    assert rows[("slab", "all")]["decline_rate"] == 1.0  # CPU: every fused decision declines
    assert data["gate_failures"] == []


@pytest.mark.parametrize("gate, limit, expect", [
    ("--max-ratio", "1000", 0), ("--max-ratio", "0.1", 1),  # (the baseline is not gated: tests/probes/test_figures.py)
    ("--max-fragmentation", "1.0", 0), ("--max-fragmentation", "0.0001", 1),
    ("--max-mean-runs", "100", 0), ("--max-mean-runs", "1.0", 1),
    ("--max-decline-rate", "1.0", 0), ("--max-decline-rate", "0.5", 1),
])
def test_compare_gates_exit_codes(sessions, capsys, gate, limit, expect):
    assert cli_main(["compare", *sessions, "--baseline", "monolithic", gate, limit]) == expect
    out = capsys.readouterr().out
    assert ("GATE FAILED" in out) == bool(expect)


def test_compare_unreadable_file_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.slabrec"
    bad.write_bytes(b"hello world, not a recording")
    assert cli_main(["compare", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a slabscope recording" in err and "\n" not in err


def test_whatif_command(sessions, capsys):
    assert cli_main(["whatif", sessions[0], "--slab-blocks", "64"]) == 0
    out = capsys.readouterr().out
    assert "recorded vs the recording: exact" in out.replace("configuration ", "")
    assert "slab 64" in out


def test_whatif_shrink_flags(sessions, capsys):
    assert cli_main(["whatif", sessions[0], "--shrink", "compact", "--shrink-budget", "1G", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recorded"]["config"]["shrink"] == "off" and data["whatif"]["config"]["shrink"] == "compact"
    assert data["whatif"]["config"]["shrink_budget"] == 2**30 and data["recorded_replay_mismatches"] == []
    assert data["whatif"]["slab_releases"] > 0 == data["recorded"]["slab_releases"]
    assert cli_main(["whatif", sessions[0], "--shrink", "release"]) == 0
    out = capsys.readouterr().out
    assert "shrink release" in out and "slabs released" in out
    assert cli_main(["whatif", sessions[0], "--shrink", "sometimes"]) == 2
    assert "invalid choice: 'sometimes'" in capsys.readouterr().err


def test_report_writes_markdown_and_plots(sessions, tmp_path, capsys):
    out = tmp_path / "report"
    assert cli_main(["report", *sessions, "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    for png in ("timeline.png", "accounting-0.png", "slabs.png", "gather_runs.png"):
        assert (out / png).stat().st_size > 1000 and png in md


def test_report_keeps_an_earlier_report_unless_forced(sessions, tmp_path, capsys):
    """A second report into the same folder is refused with one line (exit 1) and the first report.md is kept
    byte for byte; with --force it is replaced (issue 23: no command writes over a file unasked)."""
    out = tmp_path / "report"
    assert cli_main(["report", *sessions[:1], "--out", str(out)]) == 0
    first = (out / "report.md").read_bytes()
    capsys.readouterr()
    assert cli_main(["report", *sessions, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "report.md" in err[0] and "--force" in err[0], err
    assert (out / "report.md").read_bytes() == first
    assert cli_main(["report", *sessions, "--out", str(out), "--force"]) == 0
    assert (out / "report.md").read_bytes() != first
    assert not [p.name for p in out.iterdir() if "partial" in p.name]


def test_reader_side_and_parsers_do_not_import_mlx():
    code = ("import sys; import app.cli as c; c.build_parser(); "
            "import probes.replay, probes.store, probes.compare, probes.whatif, probes.recording, probes.report; "
            "assert 'mlx' not in sys.modules and 'mlx.core' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.slow
def test_record_end_to_end_with_a_tiny_model(tmp_path, capsys):
    """Real workers (spawned processes, synthetic tiny model): sessions written, table printed, and the what-if
    replay of the real slab run reproduces its recorded pool figures exactly."""
    from probes.replay import Session
    from probes.whatif import mismatches_with_recording, run_whatif

    out = tmp_path / "rec"
    code = cli_main(["record", "--model", "synthetic:tiny-llama", "--set", "n=4", "--set", "prompt_max=128",
                     "--set", "gen_max=16", "--backends", "slab,dense", "--sample-hz", "50", "--snapshot-hz", "20",
                     "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "baseline: dense" in text and "probe cost (slab)" in text
    assert "load-time rehearsal (slab): not run" in text  # a CPU run does not rehearse
    slab = Session.open(out / "churn-slab.slabrec")
    dense = Session.open(out / "churn-dense.slabrec")
    assert slab.complete and dense.complete and dense.snapshots == []
    assert slab.meta["backend"] == "slab" and slab.overhead.samples >= 1
    assert [p.name for p in slab.phases()] == ["churn"] and slab.geometry.design == "slab"
    assert mismatches_with_recording(slab, run_whatif(slab)) == []
    assert slab.snapshot_at(slab.duration).stats == slab.snapshots[-1].snapshot.stats


def test_the_rehearsal_line_says_what_ran_before_the_run_and_that_tok_s_excludes_it():
    from app.commands.record import rehearsal_line

    line = rehearsal_line({"seconds": 1.234, "batches": [8], "model_prefill_tokens": 4095,
                           "zero_filled_tokens": 28665, "decode_steps": 3, "peak_active_bytes": 5724045328})
    assert line == ("1.23 s before the run, outside its tok/s (1 batch of 8 sequences, 4095 tokens prefilled by the "
                    "model, 28665 zero-filled, 3 decode steps; peak active 5,459 MiB)")
    two = rehearsal_line({"seconds": 0.5, "batches": [1, 6], "model_prefill_tokens": 10, "zero_filled_tokens": 5,
                          "decode_steps": 4, "peak_active_bytes": 2**20})
    assert "(2 batches of 1 and 6 sequences," in two
    assert rehearsal_line(None).startswith("not run")
