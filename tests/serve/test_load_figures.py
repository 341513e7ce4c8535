"""``slabscope load``'s plan and figures without a server: the plan draws the scenario's requests (counts, lengths
in range, exact prompt lengths with a tokenizer or a byte model, one shared prefix, distinct prompts, pauses and
conversations); percentiles equal numpy's; TTFT, TPOT, latency and throughput follow their definitions from the
request times; failed requests are counted by class and the verdict names how the server failed."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.serve.load_client import RequestResult
from app.serve.load_plan import TokenCounter, plan_load
from app.serve.load_report import percentile, summarize
from app.workloads.scenarios import load_scenario


def test_percentiles_equal_numpys_linear_interpolation():
    rng = random.Random(5)
    for n in (1, 2, 7, 100):
        values = [rng.uniform(0, 50) for _ in range(n)]
        for q in (0, 50, 90, 99, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    assert percentile([], 50) is None


def test_the_plan_draws_the_scenarios_requests_with_exact_lengths_for_a_byte_model():
    scenario = load_scenario("churn", {"n": 12, "concurrency": 3})
    (phase,) = plan_load(scenario, seed=4, chars_per_token=1.0)
    params = scenario.params
    assert (phase.kind, phase.concurrency, len(phase.requests)) == ("requests", 3, 12)
    for request in phase.requests:
        assert len(request.prompt) == request.prompt_tokens  # one character per token
        assert params["prompt_min"] <= request.prompt_tokens <= params["prompt_max"]
        assert params["gen_min"] <= request.max_tokens <= params["gen_max"]
    assert len({r.prompt for r in phase.requests}) == 12
    assert plan_load(scenario, seed=4, chars_per_token=1.0) == [phase]  # a seed gives the same plan


def test_a_shared_prefix_is_the_same_text_and_a_tokenizer_cuts_exactly(tmp_path):
    from app.models.model_dir import write_tokenizer
    from tokenizers import Tokenizer

    write_tokenizer(tmp_path, 512, 4096)
    counter = TokenCounter(tmp_path)
    scenario = load_scenario("shared_prefix_burst", {"prefix_tokens": 64, "n": 3, "suffix_min": 8,
                                                     "suffix_max": 16})
    prefix_phase, burst = plan_load(scenario, seed=1, counter=counter)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for request in prefix_phase.requests + burst.requests:
        assert len(tokenizer.encode(request.prompt).ids) == request.prompt_tokens
    heads = {r.prompt[:64] for r in burst.requests}
    assert len(heads) == 1 and len({r.prompt for r in burst.requests}) == 3


def test_pauses_and_conversations_are_planned_as_such():
    idle = plan_load(load_scenario("idle", {"seconds": 0.5}))
    assert [(p.kind, p.idle_s) for p in idle] == [("idle", 0.5)]
    (talk,) = plan_load(load_scenario("multiturn", {"turns": 3}), chars_per_token=1.0)
    assert talk.kind == "conversation" and len(talk.requests) == 3


def result(index, sent, first, end, tokens, prompt=10, chunks=None, **fields) -> RequestResult:
    r = RequestResult(index, "p", sent, first=first, end=end, prompt_tokens=prompt, completion_tokens=tokens,
                      chunks=chunks if chunks is not None else [first] * tokens, **fields)
    return r


def test_the_figures_follow_their_definitions():
    results = [result(0, 0.0, 0.1, 1.1, 11, chunks=[0.1 + 0.1 * i for i in range(11)]),
               result(1, 0.5, 0.8, 2.8, 5, chunks=[0.8, 1.3, 1.8, 2.3, 2.8]),
               RequestResult(2, "p", 1.0, error="http_5xx", message="HTTP 503: the engine process was killed by "
                                                                      "signal 9 (SIGKILL); ... likely out of memory")]
    report = summarize(results, url="u", model="m", scenario="s")
    assert report["ttft_ms"]["p50"] == pytest.approx(200.0)  # 100 and 300 ms
    assert report["tpot_ms"]["mean"] == pytest.approx((100.0 + 500.0) / 2)  # (1.0 s / 10) and (2.0 s / 4)
    assert report["latency_ms"]["p99"] == pytest.approx(1100 + (2300 - 1100) * 0.99)
    assert report["itl_ms"]["n"] == 10 + 4
    assert report["duration_s"] == pytest.approx(2.8)
    assert report["throughput"]["output_tok_s"] == pytest.approx(16 / 2.8, abs=1e-3)
    assert report["throughput"]["total_tok_s"] == pytest.approx(36 / 2.8, abs=1e-3)
    assert report["errors"] == {"http_5xx": {"count": 1, "first": results[2].message}}
    assert report["verdict"].startswith("server failed: the server ran out of memory")


@pytest.mark.parametrize("error,message,health,words", [
    ("reset", "connection lost mid-answer", "unreachable: ClientConnectorError", "stopped answering"),
    ("http_5xx", "HTTP 503: the engine process was killed by signal 9 (SIGKILL); last memory sample 0.1 s before: "
                 "...; memory was far from the limit then", "HTTP 503", "engine was killed (killed by signal 9"),
    ("timeout", "no answer within 5 s", "HTTP 200", "timed out"),
])
def test_the_verdict_names_how_the_server_failed(error, message, health, words):
    report = summarize([RequestResult(0, "p", 0.0, error=error, message=message)], health=health)
    assert words in report["verdict"] and report["completed"] == 0


def test_a_clean_run_is_ok():
    report = summarize([result(0, 0.0, 0.1, 0.2, 2)], health="HTTP 200")
    assert report["verdict"] == "ok: 1 of 1 requests answered" and not report["errors"]


def test_arrivals_are_a_seeded_poisson_process_or_all_at_once():
    from app.serve.load_client import arrival_times

    times = arrival_times(4000, 20.0, random.Random(3))
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times[0] == 0.0 and all(g >= 0 for g in gaps)
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 20.0, rel=0.06)  # mean gap 1/rate
    assert arrival_times(5, 20.0, random.Random(3)) == times[:5]
    assert arrival_times(3, None, random.Random(3)) == [0.0, 0.0, 0.0]
