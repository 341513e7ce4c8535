"""``slabscope bench throughput`` on the CPU with the embedded SmolLM2 at a small size (the same command runs the
H200 workloads): every engine runs the warm-up round, five interleaved rounds and one fresh process, the figures
have medians and ranges, and the verdict names a winner only when ranges are apart and runs are enough."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.bench.throughput import MIN_RUNS_FOR_VERDICT, summarize, verdicts

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _runs(values):
    return [{"tok_s": v, "decode_step_ms": 1000.0 / v} for v in values]


def test_verdict_refuses_overlapping_ranges_and_too_few_runs():
    apart = {"a": summarize(_runs([100, 101, 102, 103, 104])), "b": summarize(_runs([200, 201, 202, 203, 204]))}
    by_metric = {v["metric"]: v for v in verdicts(apart)}
    assert by_metric["tok_s"]["winner"] == "b" and by_metric["decode_step_ms"]["winner"] == "b"
    assert "ranges do not overlap: b wins" in by_metric["tok_s"]["text"]
    overlap = {"a": summarize(_runs([100, 150, 210, 120, 130])), "b": summarize(_runs([200, 201, 202, 203, 204]))}
    assert all(v["winner"] is None and "no winner" in v["text"] for v in verdicts(overlap))
    few = {"a": summarize(_runs([100])), "b": summarize(_runs([200]))}
    assert all(v["winner"] is None and f"fewer than {MIN_RUNS_FOR_VERDICT}" in v["text"] for v in verdicts(few))
    stats = summarize(_runs([100, 300, 200]))["tok_s"]
    assert (stats["median"], stats["min"], stats["max"], stats["n"]) == (200, 100, 300, 3)


@pytest.mark.slow
def test_bench_throughput_runs_every_engine_warm_and_fresh_on_smollm2():
    argv = [sys.executable, "-m", "app", "bench", "throughput", "--model", "smollm2-135m", "--set", "n=2",
            "--set", "prompt_tokens=24", "--set", "gen_tokens=3", "--rounds", "5", "--fresh-rounds", "1", "--json"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    engines = ["dense", "slab", "mlx_lm"]
    assert result["config"]["engines"] == engines and result["device"].startswith("Device(cpu")
    for engine in engines:
        assert len(result["rounds"][engine]) == 5 and len(result["fresh"][engine]) == 1
        warm = result["warm"][engine]
        for metric in ("tok_s", "prefill_tok_s", "decode_step_ms", "first_decode_step_ms"):
            s = warm[metric]
            assert s["n"] == 5 and 0 < s["min"] <= s["median"] <= s["max"]
        assert result["fresh_stats"][engine]["tok_s"]["n"] == 1
    assert {v["metric"] for v in result["verdicts"]["warm"]} == {"tok_s", "decode_step_ms"}
    assert all(v["winner"] is None for v in result["verdicts"]["fresh"])  # one fresh run each: never a winner
    assert "round 5 slab" in done.stderr and "fresh 1 mlx_lm" in done.stderr
    assert result["fresh"]["slab"][0]["rehearsal_s"] is None  # a CPU run does not rehearse


def test_the_report_says_what_ran_before_the_timed_runs_and_that_mlx_lm_has_no_rehearsal():
    from app.bench.throughput import rehearsal_note

    fresh = {"slab": [{"rehearsal_s": 1.1}, {"rehearsal_s": 0.9}], "dense": [{"rehearsal_s": 1.0}],
             "mlx_lm": [{"tok_s": 1.0}]}
    note = rehearsal_note({"fresh": fresh})
    assert "fresh processes: median 1.00 s, 0.90-1.10 s" in note and "mlx_lm: none" in note
    assert "warm rounds" not in note
    assert rehearsal_note({"fresh": {"slab": [{"rehearsal_s": None}]}}).startswith("load-time rehearsal: none ran")


def test_the_rehearsal_note_reads_the_warm_rounds_when_no_fresh_process_ran():
    # --fresh-rounds 0 on a GPU: the warm rounds' sessions rehearsed; the note once said "none ran" there
    from app.bench.throughput import rehearsal_note

    result = {"warmup_round": {"slab": {"rehearsal_s": 0.5}, "mlx_lm": {"tok_s": 1.0}},
              "rounds": {"slab": [{"rehearsal_s": 0.2}, {"rehearsal_s": 0.4}], "dense": [{"rehearsal_s": 0.3}]},
              "fresh": {}}
    note = rehearsal_note(result)
    assert "warm rounds: median 0.35 s, 0.20-0.50 s" in note and "fresh processes" not in note
