"""Issue 23's writer cases for the commands that record a run (``record``, ``run --record``): one writer per
recording path, nothing written over an existing recording unasked, and a recording that stops with an error makes
the command fail (cases 1, 5 and 6). Every test compares the folder's bytes before and after. A live writer is a
helper process that says "ready" once its file exists and is locked (an event, never a sleep); a full disk is a
file-size limit (``RLIMIT_FSIZE``) on the command's process."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from probes.format import FORMAT_VERSION
from probes.replay import Session

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "assets" / "recordings" / "sample-churn-slab.slabrec"
TINY = ["--model", "synthetic:tiny-llama", "--set", "n=4", "--set", "prompt_max=128", "--set", "gen_max=32"]
RUN_TINY = ["--model", "synthetic:tiny-llama", "--set", "n=4", "prompt_max=128", "gen_max=32"]

HOLDER = """
import sys
sys.path.insert(0, sys.argv[2])
from probes import format as fmt
writer = fmt.RecordWriter(sys.argv[1], "live-session")
writer.append([(fmt.META, 0.0, b"a live run's first record")])
print("ready", flush=True)
sys.stdin.readline()
writer.close()
"""


def folder_state(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def slabscope(argv: list, fsize: int | None = None) -> tuple[int, str, list[str]]:
    limit = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))) if fsize else None
    result = subprocess.run([sys.executable, "-m", "app", *map(str, argv)], cwd=ROOT, capture_output=True, text=True,
                            preexec_fn=limit, timeout=600)
    return result.returncode, result.stdout, result.stderr.strip().splitlines()


def one_line(err: list[str], *words: str) -> None:
    assert len(err) == 1 and "Traceback" not in err[0], err
    for word in words:
        assert word in err[0], err


# ---- case 1: a second writer into the same path at once ----------------------------------------------------------
def test_record_into_a_folder_whose_recording_is_being_written_refuses_before_running(tmp_path, cli):
    live = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "churn-slab.slabrec"), str(ROOT)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "ready"  # the live writer holds churn-slab.slabrec now
        before = folder_state(tmp_path)
        for force in ([], ["--force"]):  # --force never replaces a live recording
            code, out, err = cli(["record", *TINY, "--backends", "dense,slab", "--out", str(tmp_path), *force])
            assert code == 1 and out == ""
            one_line(err, "churn-slab.slabrec: is being written by another slabscope process")
            assert folder_state(tmp_path) == before  # dense's claimed file was given back: nothing new
        code, out, err = cli(["run", *RUN_TINY, "--record", str(tmp_path / "churn-slab.slabrec"), "--force"])
        assert code == 1
        one_line(err, "is being written by another slabscope process")
        assert folder_state(tmp_path) == before
    finally:
        live.stdin.close()
        assert live.wait(60) == 0


@pytest.mark.slow
def test_two_records_into_one_folder_at_once_give_one_recording(tmp_path):
    """At 5241d86 both printed "ok" and the file interleaved both runs (the reader kept one sample). Whichever
    claims the file first records; the other refuses with one line, whatever the timing."""
    argv = [sys.executable, "-m", "app", "record", *TINY, "--backends", "slab", "--out", str(tmp_path)]
    procs = [subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(proc.wait(600), *proc.communicate()) for proc in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], results
    refused = next(err for code, _, err in results if code == 1)
    one_line(refused.strip().splitlines(), "churn-slab.slabrec:")
    session = Session.open(tmp_path / "churn-slab.slabrec")
    assert session.complete and session.damage is None and len(session.samples) >= 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["churn-slab.slabrec"]


# ---- case 5: an earlier recording at the same path ---------------------------------------------------------------
def test_record_and_run_refuse_an_earlier_recording_and_keep_it(tmp_path, cli):
    """At 5241d86 a second ``record`` into the same ``--out`` (and ``run --record`` onto an existing file)
    replaced the earlier recording: 82 samples / 64 ops became 2 samples / 13 ops."""
    shutil.copy(SHIPPED, tmp_path / "churn-slab.slabrec")
    before = folder_state(tmp_path)
    code, out, err = cli(["record", *TINY, "--backends", "dense,slab", "--out", str(tmp_path)])
    assert code == 1 and out == ""
    one_line(err, "churn-slab.slabrec: exists (79,814 bytes)", "--force")
    code, out, err = cli(["run", *RUN_TINY, "--record", str(tmp_path / "churn-slab.slabrec")])
    assert code == 1 and out == ""
    one_line(err, "exists", "--force")
    assert folder_state(tmp_path) == before


def test_record_ranks_refuses_an_earlier_rank_recording_before_launching(tmp_path, cli):
    shutil.copy(SHIPPED, tmp_path / "churn-slab-rank1.slabrec")
    before = folder_state(tmp_path)
    code, out, err = cli(["record", "--ranks", "2", *TINY, "--backends", "slab", "--out", str(tmp_path)])
    assert code == 1 and out == ""
    one_line(err, "churn-slab-rank1.slabrec: exists (79,814 bytes)", "--force")
    assert folder_state(tmp_path) == before


def test_a_recording_never_names_the_scenario_it_runs(tmp_path, cli):
    scenario = tmp_path / "mine.toml"
    shutil.copy(ROOT / "assets" / "scenarios" / "churn.toml", scenario)
    before = folder_state(tmp_path)
    for force in ([], ["--force"]):
        code, _, err = cli(["run", "--model", "synthetic:tiny-llama", "--scenario", str(scenario), "--record",
                            str(scenario), *force])
        assert code == 1
        one_line(err, "same file as the input")
        assert folder_state(tmp_path) == before


@pytest.mark.slow
def test_run_record_force_replaces_a_finished_recording(tmp_path, cli):
    target = tmp_path / "run.slabrec"
    shutil.copy(SHIPPED, target)
    code, out, err = cli(["run", *RUN_TINY, "--record", str(target), "--force", "--json"])
    assert code == 0, err
    summary = json.loads(out)
    assert summary["recording"] == {"path": str(target), "error": None}
    session = Session.open(target)
    assert session.complete and session.format_version == FORMAT_VERSION and session.meta["model"]["name"] != "smollm2-135m"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.slabrec"]


# ---- case 6: the recording stops with an error -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("where", [[], ["--worker"]])
def test_run_record_fails_when_its_recording_stops(tmp_path, where):
    """At 5241d86 ``run --record`` exited 0 when the file could not be written; the only sign was a progress line
    and the ``--json`` summary had no field for it."""
    target = tmp_path / "run.slabrec"
    code, out, err = slabscope(["run", *RUN_TINY, "--record", target, "--json", *where], fsize=6000)
    assert code == 1
    summary = json.loads(out)
    assert summary["recording"]["path"] == str(target)
    assert summary["recording"]["error"].startswith("recording stopped: File too large")
    assert err[-1] == f"slabscope run: {summary['recording']['error']}; the file holds the run up to that point"
    session = Session.open(target)  # what was written before the limit is a readable prefix (a torn tail)
    assert not session.complete and session.incomplete_tail_bytes > 0 and os.path.getsize(target) == 6000


def test_record_and_run_read_a_stopped_recording_from_the_summary_in_one_place():
    from app.commands.outputs import recording_problem

    assert recording_problem({"recording": {"path": "x", "error": "recording stopped: No space left on device"}}) \
        == "recording stopped: No space left on device"
    assert recording_problem({"recording": {"path": "x", "error": None}}) is None
    assert recording_problem({}) is None and recording_problem(None) is None


# ---- the TUI's R key: a live recording under a name of its own ---------------------------------------------------
def test_the_tuis_recorder_takes_a_new_name_when_its_name_is_taken(tmp_path):
    """Two TUIs recording the same scenario in the same second used one file name: the second replaced the first.
    Now the second takes ``-2``; every existing file keeps its bytes."""
    from app.tui.sources import LiveRecorder
    from probes.events import MetaUpdate, Sample
    from probes.store import SessionModel

    model = SessionModel(label="slab")
    model.append(MetaUpdate(t=10.0, meta={"backend": "slab", "t_start": 10.0}))
    sample = Sample(t=10.5, active=1, cache=0, footprint=1, peak=1, footprint_max=1, rss=1, rss_max=1,
                    sys_available=1, weights=0, pool_live=0, pool_free=0, other_active=1, rss_other=0, cost_us=1.0)
    first = LiveRecorder(tmp_path, "churn")
    first.write(model, [sample])
    taken = first.paths[0]
    live = LiveRecorder(tmp_path, "churn")
    live.stamp = first.stamp  # the same second, while the first is still recording
    live.write(model, [sample])
    assert first.close() == [taken] and live.paths == [taken.with_name(taken.stem + "-2.slabrec")]
    taken_bytes = taken.read_bytes()
    late = LiveRecorder(tmp_path, "churn")
    late.stamp = first.stamp  # the same second, after the first finished
    late.write(model, [sample])
    assert late.paths == [taken.with_name(taken.stem + "-3.slabrec")] and taken.read_bytes() == taken_bytes
    for path in [taken, *live.close(), *late.close()]:
        assert Session.open(path).complete
