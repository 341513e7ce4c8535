"""``slabscope bench blas`` (the README's OpenBLAS speed-up figure): each measurement in a fresh process on the BLAS
it names (OpenBLAS loaded before mlx, as the app's bootstrap does), the two BLASes interleaved with the order
alternating, the speed-up per round and its median and range; bad flags are one line and start nothing."""

from __future__ import annotations

import json
import os
import sys

import pytest

from app.bench import blas as bench_blas
from app.models.blas import OPENBLAS_PATH

HAVE_OPENBLAS = sys.platform.startswith("linux") and os.path.exists(OPENBLAS_PATH)
TINY = ["bench", "blas", "--size", "64", "--repeats", "1"]


def test_json_has_every_figure_and_each_child_ran_on_the_blas_it_names(cli):
    code, out, _ = cli([*TINY, "--rounds", "2", "--json"])
    assert code == 0
    result = json.loads(out)
    assert {"size", "repeats", "rounds", "threads", "blas", "seconds", "seconds_stats", "speedups",
            "speedup"} <= result.keys()
    assert (result["size"], result["repeats"], result["rounds"], result["threads"]) == (64, 1, 2, 1)
    assert set(result["blas"]) == set(result["seconds"]) == {"reference", "openblas"}
    assert all(len(v) == 2 and min(v) > 0 for v in result["seconds"].values())
    expected = [r / o for r, o in zip(result["seconds"]["reference"], result["seconds"]["openblas"])]
    assert result["speedups"] == pytest.approx(expected)
    assert result["speedup"]["min"] <= result["speedup"]["median"] <= result["speedup"]["max"]
    assert "reference BLAS" in result["blas"]["reference"]


@pytest.mark.skipif(not HAVE_OPENBLAS, reason=f"needs Linux with OpenBLAS at {OPENBLAS_PATH} (`make test` installs "
                    "it as root on Debian)")
def test_the_openblas_child_loaded_it_before_mlx_with_the_threads_asked_for(cli):
    code, out, _ = cli([*TINY, "--rounds", "1", "--threads", "2", "--json"])
    blas = json.loads(out)["blas"]["openblas"]
    assert code == 0 and blas.startswith("BLAS: OpenBLAS") and blas.endswith(", 2 threads")


def test_text_report_prints_the_times_and_the_speed_up(cli):
    code, out, _ = cli([*TINY, "--rounds", "2"])
    lines = out.strip().splitlines()
    assert code == 0 and "fp32 64x64x64 matmul" in lines[0] and "OPENBLAS_NUM_THREADS=1" in lines[0]
    assert [line.split(" ms per matmul: ")[0].strip() for line in lines if " ms per matmul: " in line] == \
        ["reference", "openblas"]
    assert all(len(line.split(": ")[1].split(", ")) == 2 for line in lines if " ms per matmul: " in line)
    assert lines[-1].startswith("OpenBLAS speed-up: median ") and lines[-1].endswith(" over 2 interleaved rounds")


def test_rounds_alternate_the_order_and_pair_each_round(monkeypatch):
    calls = []
    times = {"reference": iter([8.0, 6.0, 9.0]), "openblas": iter([2.0, 3.0, 1.0])}

    def fake(which, size, repeats, threads):
        calls.append(which)
        return f"BLAS: {which}", next(times[which])

    monkeypatch.setattr(bench_blas, "measure_fresh", fake)
    result = bench_blas.run_blas_bench(3, 8, 1, 1)
    assert calls == ["reference", "openblas", "openblas", "reference", "reference", "openblas"]
    assert result["speedups"] == [4.0, 2.0, 9.0]
    assert result["speedup"] == {"median": 4.0, "min": 2.0, "max": 9.0}
    assert "median 4.0x [2.0x .. 9.0x] over 3 interleaved rounds" in bench_blas.format_report(result)


def test_a_failed_measurement_process_is_one_line(cli, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")
    code, out, err = cli([*TINY, "--rounds", "1"])
    assert code == 1 and out == "" and len(err) == 1, (code, err)
    assert err[0].startswith("slabscope bench: the reference measurement process failed (exit 1)")


@pytest.mark.parametrize("flag, value, text", [
    ("--size", "0", "argument --size: must be >= 1, got 0"),
    ("--size", "100000", "argument --size: must be <= 16,384, got 100,000"),
    ("--rounds", "many", "argument --rounds: 'many' is not a whole number"),
    ("--repeats", "1e9", "argument --repeats: '1e9' is not a whole number"),
    ("--threads", "-1", "argument --threads: must be >= 1, got -1"),
])
def test_bad_flags_are_one_line_and_start_nothing(flag, value, text, cli, monkeypatch):
    monkeypatch.setattr(bench_blas, "measure_fresh", lambda *a: pytest.fail("a measurement started"))
    code, out, err = cli(["bench", "blas", flag, value])
    assert code == 2 and out == "" and len(err) == 1 and text in err[0], (code, err)
