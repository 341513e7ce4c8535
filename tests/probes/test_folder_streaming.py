"""``compare`` and ``report`` over a folder of many recordings (a generated folder: one small recording linked N
times): each file is read, reduced to what the table and plots need (probes/digest.py) and let go before the next is
opened; progress goes to stderr at every 5% ("read k/N files"); Ctrl-C stops between two files with one line, exit
130. They used to open every session at once (2,000 recordings: 1.2 GB for compare, report killed at 300 s). Memory
and order are asserted here, not speed (``slabscope bench folder`` times it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import pytest

import probes.replay as replay

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "assets" / "recordings" / "sample-churn-slab.slabrec"


def make_folder(folder: Path, count: int) -> list[str]:
    """``count`` names for the sample recording (hard links where the filesystem has them, else copies)."""
    folder.mkdir()
    paths = []
    for index in range(count):
        path = folder / f"s{index:04d}.slabrec"
        try:
            os.link(SAMPLE, path)
        except OSError:
            path.write_bytes(SAMPLE.read_bytes())
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("many") / "recordings"
    return root, make_folder(root, 40)


@pytest.fixture
def lifetimes(monkeypatch):
    """("open", path) when a session is opened and ("gone", path) when it is freed, in order."""
    events: list[tuple[str, str]] = []
    real = replay.Session.open.__func__

    def tracked(cls, path, *args, **kwargs):
        session = real(cls, path, *args, **kwargs)
        events.append(("open", str(path)))
        weakref.finalize(session, events.append, ("gone", str(path)))
        return session

    monkeypatch.setattr(replay.Session, "open", classmethod(tracked))
    return events


def _one_at_a_time(events: list, paths: list[str]) -> None:
    assert events[:2 * len(paths)] == [(kind, p) for p in paths for kind in ("open", "gone")]


def test_compare_reads_one_file_at_a_time_in_order(cli, folder, lifetimes):
    root, paths = folder
    code, out, err = cli(["compare", str(root), "--json"])
    assert code == 0
    _one_at_a_time(lifetimes, paths)
    rows = json.loads(out)["rows"]
    assert len(rows) == 2 * len(paths) and {r["footprint_ratio"] for r in rows if not r["is_baseline"]} == {1.0}
    assert [r["footprint_ratio"] for r in rows if r["is_baseline"]] == [None, None]  # the first file, not itself
    assert err == [f"slabscope compare: read {k}/40 files" for k in range(2, 41, 2)]


def test_compare_of_the_folder_equals_compare_of_the_files_held_together(cli, folder):
    from probes.compare import compare_sessions, rows_to_json
    from probes.replay import Session

    root, paths = folder
    _, out, _ = cli(["compare", str(root), "--json"])
    held = rows_to_json(compare_sessions([Session.open(p) for p in paths[:3]]))
    assert json.loads(out)["rows"][:len(held)] == held


def test_report_reads_one_file_at_a_time_and_stays_readable(cli, folder, lifetimes, tmp_path, monkeypatch):
    import probes.report

    monkeypatch.setattr(probes.report, "ACCOUNTING_PLOTS", 3)  # the rule, at a test's cost (16 by default)
    ACCOUNTING_PLOTS = 3
    root, paths = folder
    out = tmp_path / "report"
    code, stdout, err = cli(["report", str(root), "--out", str(out)])
    assert code == 0 and stdout.strip() == str(out / "report.md")
    _one_at_a_time(lifetimes, paths)  # then the first ones again, one at a time, for their accounting plots
    again = lifetimes[2 * len(paths):]
    assert again == [(kind, p) for p in paths[:ACCOUNTING_PLOTS] for kind in ("open", "gone")]
    md = (out / "report.md").read_text()
    assert f"Accounting plots for the first {ACCOUNTING_PLOTS} of 40 sessions" in md
    assert sorted(p.name for p in out.glob("accounting-*.png")) == \
        sorted(f"accounting-{i}.png" for i in range(ACCOUNTING_PLOTS))
    assert md.count("| `") == 40  # the metadata table: one row per session
    assert err[-1] == "slabscope report: read 40/40 files"


def test_a_bad_baseline_is_refused_before_the_report_folder_is_made(cli, folder, tmp_path):
    _, paths = folder
    code, _, err = cli(["report", *paths[:2], "--out", str(tmp_path / "never"), "--baseline", "nosuch"])
    assert code == 2 and "matches no session" in err[-1] and not (tmp_path / "never").exists()


def test_few_sessions_print_no_progress(cli, folder):
    _, paths = folder
    code, _, err = cli(["compare", *paths[:3]])
    assert code == 0 and err == []


@pytest.mark.parametrize("command", ["compare", "report"])
def test_ctrl_c_stops_between_two_files_with_one_line(tmp_path, command):
    """SIGINT once the first progress line is out: exit 130, one line saying how far it got, short of the end."""
    root = tmp_path / "big"
    make_folder(root, 600)
    extra = ["--out", str(tmp_path / "report")] if command == "report" else []
    # Ctrl-C as a terminal delivers it: the command starts with Python's own SIGINT handler whatever this test
    # process inherited (a runner that ignores SIGINT passes SIG_IGN to its children, and Python then installs none)
    argv = ["app", command, str(root), *extra]
    launcher = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                f"sys.argv = {argv!r}; runpy.run_module('app', run_name='__main__', alter_sys=True)")
    proc = subprocess.Popen([sys.executable, "-c", launcher], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    first = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert first.wait(120), lines
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        reader.join(10)
    finally:
        proc.kill()
    assert proc.returncode == 130 and proc.stdout.read() == ""
    progress, last = lines[:-1], lines[-1]
    assert progress and all(line.startswith(f"slabscope {command}: read ") for line in progress)
    done = int(last.split("after reading ")[1].split(" of ")[0])
    assert last == f"slabscope {command}: interrupted after reading {done} of 600 files"
    assert int(progress[-1].split("read ")[1].split("/")[0]) <= done < 600
    assert not (tmp_path / "report").exists()  # the report had not begun writing
