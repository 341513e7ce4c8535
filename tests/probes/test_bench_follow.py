"""``slabscope bench follow`` (docs/distributed.md's cost of following a growing rank recording): mlx-free, every
refresh takes the records appended before it, the figures are the median and range over rounds; bad flags and a
tail longer than the session are one line."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from app.bench import follow as bench_follow

TINY = ["bench", "follow", "--seconds", "30", "--tail-records", "40"]


def test_json_has_every_figure(cli):
    code, out, _ = cli([*TINY, "--rounds", "2", "--json"])
    assert code == 0
    result = json.loads(out)
    assert {"seconds", "file_bytes", "records", "rounds", "tail_records", "flush_records", "refresh_ms_rounds",
            "open_ms_rounds", "refresh_ms", "open_ms"} <= result.keys()
    assert (result["seconds"], result["rounds"], result["tail_records"], result["flush_records"]) == (30.0, 2, 40, 5)
    assert result["records"] > 40 and result["file_bytes"] > 0
    for key in ("refresh_ms", "open_ms"):
        values = result[f"{key}_rounds"]
        assert len(values) == 2 and min(values) > 0
        assert result[key] == {"median": statistics.median(values), "min": min(values), "max": max(values)}


def test_text_report_and_mlx_free():
    """In a fresh process (``python -m app``): the three lines of figures, and mlx never imported."""
    code = ("import runpy, sys; sys.argv = ['slabscope', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('app', run_name='__main__')\n"
            "except SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'mlx'], 'mlx imported'\n")
    done = subprocess.run([sys.executable, "-c", code, *TINY, "--rounds", "1"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3 and lines[0].endswith("records; 1 rounds after a warm-up")
    assert lines[1].startswith("refresh (5 new records): median ") and lines[1].endswith("]")
    assert lines[2].startswith("Session.open of the whole file: median ")


def test_every_refresh_is_checked_to_take_what_was_appended(tmp_path, monkeypatch):
    from probes.follow import GrowingSession
    from probes.synthetic import write_synthetic_session

    whole = tmp_path / "s.slabrec"
    write_synthetic_session(whole, seconds=20.0)
    data, ends = whole.read_bytes(), bench_follow.record_ends(whole)
    assert ends[-1] == len(data) and ends == sorted(ends)
    refresh, open_s = bench_follow.one_round(whole, tmp_path / "live.slabrec", data, ends, 30, 5)
    assert refresh > 0 and open_s > 0
    monkeypatch.setattr(GrowingSession, "refresh", lambda self: 0)  # a refresh that reads nothing
    with pytest.raises(RuntimeError, match="took 0 of the 25 records appended"):
        bench_follow.one_round(whole, tmp_path / "live.slabrec", data, ends, 30, 5)


@pytest.mark.parametrize("argv, text", [
    (["--rounds", "0"], "argument --rounds: must be >= 1, got 0"),
    (["--seconds", "nan"], "argument --seconds: must be a finite number, got nan"),
    (["--seconds", "1e9"], "argument --seconds: must be <= 86400, got 1e9"),
    (["--flush-records", "x"], "argument --flush-records: 'x' is not a whole number"),
], ids=["rounds 0", "seconds nan", "seconds 1e9", "flush x"])
def test_bad_flags_are_one_line_and_start_nothing(argv, text, cli, monkeypatch):
    monkeypatch.setattr(bench_follow, "run_follow_bench", lambda *a, **k: pytest.fail("the bench started"))
    code, out, err = cli(["bench", "follow", *argv])
    assert code == 2 and out == "" and len(err) == 1 and text in err[0], (code, err)


def test_a_tail_longer_than_the_session_is_one_line(cli):
    code, out, err = cli(["bench", "follow", "--seconds", "10", "--tail-records", "5000"])
    assert code == 2 and out == "" and len(err) == 1, (code, err)
    assert "--tail-records 5000 must be below the session's" in err[0]
