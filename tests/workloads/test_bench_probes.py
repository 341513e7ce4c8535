"""``slabscope bench probes`` on a tiny model: each pair's line and the summary say what the probes' start and stop
cost inside the probes-on run (a short run pays them once, so they are part of its throughput overhead)."""

from __future__ import annotations

import re

from app.cli import main


def test_bench_probes_reports_the_probes_start_and_stop_inside_the_timed_run(capsys):
    assert main(["bench", "probes", "--reps", "1", "--model", "synthetic:tiny-llama"]) == 0
    out = capsys.readouterr().out
    pair = re.search(r"start \+ stop ([0-9.]+) ms \(in the timed run\)", out)
    assert pair and float(pair.group(1)) > 0, out
    share = re.search(r"inside the probes-on run's wall time: ([0-9.]+)% \[([0-9.]+)-([0-9.]+)\]", out)
    assert share and 0 < float(share.group(1)) < 100, out
