"""``slabscope bench throughput``: the round logic on stand-in engines (a warm-up round apart, rounds whose order
rotates, medians and ranges, a verdict only when ranges are apart and runs are enough), and the real command end to
end on the smallest workload (one warm round, one fresh process per engine). The bench's figures are the bench's
business: nothing here times anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.bench import throughput
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


def _fake_engine_runs(monkeypatch) -> list[str]:
    """``run_engine`` replaced by a stand-in whose figures are known (engine e's run k: tok/s 100 * (e + 1) + k) and
    that records the order engines ran in; ``load`` by a no-op (nothing is loaded)."""
    calls: list[str] = []

    def run_engine(engine, config, loaded, requests):
        calls.append(engine)
        tok_s = 100.0 * (list(config.engines).index(engine) + 1) + calls.count(engine)
        return {"tok_s": tok_s, "prefill_tok_s": 2 * tok_s, "decode_step_ms": 1000.0 / tok_s,
                "first_decode_step_ms": 2000.0 / tok_s, "footprint_bytes": int(tok_s) * 2**20,
                "footprint_mib": float(int(tok_s))}

    monkeypatch.setattr(throughput, "run_engine", run_engine)
    monkeypatch.setattr(throughput, "load", lambda config: (None, None))
    return calls


def test_warm_rounds_run_every_engine_once_each_in_an_order_that_rotates(monkeypatch):
    """A warm-up round (every engine once, reported apart), then ``rounds`` rounds whose order rotates, so no
    engine always runs first or last; the stats and verdicts are over the rounds only."""
    calls = _fake_engine_runs(monkeypatch)
    config = throughput.BenchConfig(engines=("dense", "slab", "mlx_lm"), rounds=5, fresh_rounds=0)
    result = throughput.run_bench(config)
    engines = ["dense", "slab", "mlx_lm"]
    rotations = [engines[k % 3:] + engines[:k % 3] for k in range(5)]
    assert calls == engines + [engine for order in rotations for engine in order]
    assert [run["tok_s"] for run in result["rounds"]["slab"]] == [202, 203, 204, 205, 206]  # warm-up: 201
    assert result["warmup_round"]["slab"]["tok_s"] == 201 and result["fresh"] == {}
    slab = result["warm"]["slab"]["tok_s"]
    assert (slab["n"], slab["median"], slab["min"], slab["max"]) == (5, 204, 202, 206)
    by_pair = {(v["a"], v["b"], v["metric"]): v for v in result["verdicts"]["warm"]}
    assert by_pair[("dense", "slab", "tok_s")]["winner"] == "slab"  # 102-106 vs 202-206: apart, 5 runs each
    assert by_pair[("dense", "slab", "decode_step_ms")]["winner"] == "slab"
    assert result["verdicts"]["fresh"] == []
    assert not any(v["metric"] == "footprint_mib" for v in result["verdicts"]["warm"])  # shown, never judged
    report = throughput.format_report(result)
    header = next(line for line in report.splitlines() if line.startswith("engine"))
    slab_row = next(line for line in report.splitlines() if line.startswith("slab "))
    assert header.rstrip().endswith("max(active+cache) MiB") and slab_row.rstrip().endswith("204 [202-206]")
    assert "prefill in flight <= 2,048 MiB above weights + K/V" in report.splitlines()[0]  # the default bound
    result["config"]["prefill_inflight"] = None
    assert "in flight" not in throughput.format_report(result).splitlines()[0]


@pytest.mark.slow
def test_bench_throughput_runs_every_engine_warm_and_fresh_end_to_end():
    """The real command on the smallest workload (tiny llama, 2 prompts of 24 tokens, 3 generated): one warm
    round and one fresh process per engine, every figure measured (the round logic is tested above)."""
    argv = [sys.executable, "-m", "app", "bench", "throughput", "--model", "synthetic:tiny-llama", "--set", "n=2",
            "--set", "prompt_tokens=24", "--set", "gen_tokens=3", "--rounds", "1", "--fresh-rounds", "1", "--json"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    engines = ["dense", "slab", "mlx_lm"]
    assert result["config"]["engines"] == engines and result["device"].startswith("Device(cpu")
    for engine in engines:
        assert len(result["rounds"][engine]) == 1 and len(result["fresh"][engine]) == 1
        for run in (result["warmup_round"][engine], result["rounds"][engine][0], result["fresh"][engine][0]):
            assert all(run[metric] > 0 for metric in ("tok_s", "prefill_tok_s", "decode_step_ms",
                                                      "first_decode_step_ms", "footprint_bytes",
                                                      "footprint_mib")), (engine, run)
        assert result["warm"][engine]["tok_s"]["n"] == 1 and result["fresh_stats"][engine]["tok_s"]["n"] == 1
        assert result["fresh"][engine][0]["load_s"] > 0  # loaded in its own process
    assert all(v["winner"] is None for v in result["verdicts"]["warm"] + result["verdicts"]["fresh"])  # 1 run each
    assert "warm-up slab" in done.stderr and "round 1 mlx_lm" in done.stderr and "fresh 1 mlx_lm" in done.stderr
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


class _Stop(Exception):
    pass


def _specs_run(monkeypatch) -> list:
    """The RunSpecs the slabscope engines' runs are given, from now on (each run stops there with ``_Stop``)."""
    import app.workloads.runner as runner

    specs: list = []

    def capture(spec, sink, loaded=None):
        specs.append(spec)
        raise _Stop

    monkeypatch.setattr(runner, "run_workload", capture)
    return specs


def test_slab_blocks_reach_the_pool_engines_run_and_the_report(monkeypatch, capsys):
    """``--slab-blocks`` is the slabscope engines' rows per slab (their RunSpec), said in the report's first line;
    a value that is not a positive int is refused in one line before anything runs."""
    from app.cli import main

    specs = _specs_run(monkeypatch)
    config = throughput.BenchConfig(engines=("slab",), rounds=1, fresh_rounds=0, slab_blocks=128)
    with pytest.raises(_Stop):
        throughput._slabscope_run("slab", config, loaded=None)
    assert specs[0].slab_blocks == 128 and specs[0].backend == "slab"
    result = {"config": {**config.__dict__, "engines": list(config.engines)}, "device": "Device(cpu, 0)",
              "mlx": "0", "warm": {}, "fresh_stats": {}, "verdicts": {}, "rounds": {}, "warmup_round": {},
              "fresh": {}}
    monkeypatch.setattr(throughput, "rehearsal_note", lambda result: "")
    assert "; 128 rows per slab" in throughput.format_report(result).splitlines()[0]
    assert main(["bench", "throughput", "--slab-blocks", "0"]) == 2
    err = capsys.readouterr().err
    assert "--slab-blocks" in err and len(err.strip().splitlines()) == 1 and not specs[1:]


def test_an_engine_named_slab_rows_runs_the_pool_at_its_own_rows_per_slab(monkeypatch):
    """``--engines slab,slab:128,dense``: two slab sizes interleaved in one bench, each its own engine (rounds,
    stats, verdicts by name); ``slab:128`` runs the slab pool at 128 rows whatever ``--slab-blocks`` says, plain
    ``slab`` at ``--slab-blocks``. Sizes only on pool engines, positive ints, no engine named twice: one line."""
    specs = _specs_run(monkeypatch)
    config = throughput.BenchConfig(engines=("slab", "slab:128", "monolithic:8", "dense"), rounds=1, fresh_rounds=0,
                                    slab_blocks=16)
    for engine in ("slab", "slab:128", "monolithic:8"):
        with pytest.raises(_Stop):
            throughput._slabscope_run(engine, config, loaded=None)
    assert [(s.backend, s.slab_blocks) for s in specs] == [("slab", 16), ("slab", 128), ("monolithic", 8)]
    assert throughput.engine_parts("mlx_lm") == ("mlx_lm", None, None, False)
    for engines, said in ((("dense:4",), "only slab and monolithic take rows per slab"),
                          (("slab:0",), "ROWS a positive int"), (("slab:08",), "ROWS a positive int"),
                          (("slab:x",), "ROWS a positive int"), (("slab", "slab"), "named twice: slab"),
                          (("slab:128", "slab:128"), "named twice: slab:128"), (("vllm",), "unknown engine")):
        with pytest.raises(ValueError, match=said) as caught:
            throughput.BenchConfig(engines=engines, rounds=1, fresh_rounds=0)
        assert "\n" not in str(caught.value)


def test_an_engine_named_with_an_allowance_runs_under_its_own_inflight_bound(monkeypatch):
    """``--engines slab,slab@8G,dense@off,slab:128@512M``: a slabscope engine named ``NAME@BYTES`` (or ``@off``) runs
    under its own prefill in-flight allowance, the others under the bench's; the report's first line says so and
    its tables fit the longest name. Allowances only on slabscope engines, byte sizes or off: one line."""
    specs = _specs_run(monkeypatch)
    engines = ("slab", "slab@8G", "dense@off", "slab:128@512M")
    config = throughput.BenchConfig(engines=engines, rounds=1, fresh_rounds=0, prefill_inflight=1 << 30)
    for engine in engines:
        with pytest.raises(_Stop):
            throughput._slabscope_run(engine, config, loaded=None)
    assert [(s.backend, s.slab_blocks, s.prefill_inflight) for s in specs] == [
        ("slab", None, 1 << 30), ("slab", None, 8 << 30), ("dense", None, None), ("slab", 128, 512 << 20)]
    assert specs[2].trim_fraction() is not None  # an unbounded engine trims as --prefill-inflight off would
    stats = {engine: {"tok_s": {"median": 1.0, "min": 1.0, "max": 1.0}} for engine in engines}
    result = {"config": {**config.__dict__, "engines": list(engines)}, "device": "Device(cpu, 0)", "mlx": "0",
              "warm": stats, "fresh_stats": {}, "verdicts": {}, "rounds": {}, "warmup_round": {}, "fresh": {}}
    monkeypatch.setattr(throughput, "rehearsal_note", lambda result: "")
    report = throughput.format_report(result).splitlines()
    assert "<= 1,024 MiB above weights + K/V (slabscope engines, but an engine named NAME@BYTES: its own)" in report[0]
    rows = [line for line in report if line.split(" ")[0] in engines]
    assert len(rows) == 4 and len({line.index(" 1") for line in rows}) == 1  # one column start for every name
    for engines, said in ((("mlx_lm@8G",), "only dense, slab, monolithic take a prefill in-flight allowance"),
                          (("slab@8Q",), "after @ must be a byte size"), (("slab@",), "after @ must be a byte size"),
                          (("dense:4@8G",), "only slab and monolithic take rows per slab"),
                          (("slab@8G", "slab@8G"), "named twice: slab@8G")):
        with pytest.raises(ValueError, match=said) as caught:
            throughput.BenchConfig(engines=engines, rounds=1, fresh_rounds=0)
        assert "\n" not in str(caught.value)
