"""``slabscope run`` / ``slabscope generate``: listing, errors (exit 2, one line), JSON summary, answers."""

import json

import pytest

from app.cli import main

from .helpers import burst_toml, write_scenario

TINY = burst_toml(n=3, concurrency=2, prompt_tokens="[10, 30]", gen_tokens="3")


def test_run_list_shows_every_scenario(capsys):
    assert main(["run", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("idle", "distinct_burst", "shared_prefix_burst", "seqshare", "multiturn", "churn"):
        assert name in out


@pytest.mark.parametrize("argv, message", [
    (["run", "--scenario", "nope"], "unknown scenario 'nope'"),
    (["run", "--model", "nope"], "unknown model 'nope'"),
    (["run", "--set", "bogus=1"], "no parameter 'bogus'"),
    (["generate", "--prompt", "hi", "--model", "nope"], "unknown model 'nope'"),
    (["generate", "--prompt", "hi", "--max-tokens", "0"], "argument --max-tokens: must be >= 1, got 0"),
])
def test_bad_names_exit_2_with_one_clear_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_run_json_summary_on_a_tiny_model(tmp_path, capsys):
    scenario = write_scenario(tmp_path, TINY)
    assert main(["run", "--scenario", scenario, "--model", "synthetic:tiny-qwen3", "--backend", "monolithic",
                 "--json", "--block-size", "4", "--slab-blocks", "2", "--set", "n=2"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["backend"] == "monolithic" and summary["requests_finished"] == 2
    assert summary["decode_tokens"] == 6 and summary["phases"]["burst"]["decode_tok_s"] > 0
    assert summary["footprint"]["max_footprint_bytes"] > 0 and summary["footprint"]["max_rss_bytes"] > 0
    assert "phase burst: start" in captured.err  # progress goes to stderr with --json


def test_run_text_summary(tmp_path, capsys):
    scenario = write_scenario(tmp_path, TINY)
    assert main(["run", "--scenario", scenario, "--model", "synthetic:tiny-llama", "--block-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "== t on slab (synthetic:tiny-llama) ==" in out
    assert "footprint: max(active+cache)" in out and "pool: slabs in layer 0" in out


def test_generate_on_a_synthetic_model_prints_text(capsys):
    assert main(["generate", "--prompt", "hello", "--model", "synthetic:tiny-llama", "--max-tokens", "5",
                 "--backend", "dense"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() and "5 generated tokens" in captured.err


@pytest.mark.parametrize("backend", ["slab", "dense"])
def test_generate_prints_prompt_and_generation_tok_s_and_memory_as_mlx_lm_does(capsys, backend):
    """At 5241d86 generate printed one line of token counts and seconds: no memory, no tok/s split (mlx-lm prints
    "Prompt: N tokens, X tokens-per-sec", "Generation: ...", "Peak memory: ...")."""
    import re

    assert main(["generate", "--prompt", "hello", "--model", "synthetic:tiny-llama", "--max-tokens", "6",
                 "--backend", backend, "--no-chat-template"]) == 0
    err = capsys.readouterr().err
    prompt = re.search(r"^Prompt: (\d+) tokens, ([\d,.]+) prefill tok/s$", err, re.M)
    generation = re.search(r"^Generation: (\d+) tokens, ([\d,.]+) decode tok/s$", err, re.M)
    memory = re.search(r"^Peak memory: max\(act\+cache\) ([\d.]+ [KMG]iB) sampled after every step .*MLX's peak "
                       r"counter ([\d.]+ [KMG]iB) .*; RSS ([\d.]+ [KMG]iB)$", err, re.M)
    assert prompt and generation and memory, err
    assert int(prompt.group(1)) == 5 and int(generation.group(1)) == 6  # "hello": 5 bytes for the byte tokenizer
    assert float(prompt.group(2).replace(",", "")) > 0 and float(generation.group(2).replace(",", "")) > 0


@pytest.mark.slow
def test_generate_answers_paris(capsys, monkeypatch, smollm2):
    """The default model through the generate command: its chat template, the slab engine's greedy decode and the
    printed answer. The session's SmolLM2 (fp32 on CPU, what the command's defaults load) stands in for the load,
    which tests/models checks."""
    import app.models

    asked = []
    monkeypatch.setattr(app.models, "load_model", lambda name, **kw: asked.append((name, kw)) or smollm2)
    assert main(["generate", "--prompt", "What is the capital of France?", "--max-tokens", "24"]) == 0
    assert "Paris" in capsys.readouterr().out
    assert asked == [("smollm2-135m", {"dtype": None, "device": None, "seed": 0})]


@pytest.mark.slow
def test_run_in_a_worker_process(tmp_path, capsys):
    scenario = write_scenario(tmp_path, TINY)
    assert main(["run", "--scenario", scenario, "--model", "synthetic:tiny-llama", "--worker", "--json",
                 "--backend", "dense"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["backend"] == "dense" and summary["requests_finished"] == 3 and "probe_overhead" in summary


def test_the_parsers_import_light_choices_equal_the_specs():
    # arg_types keeps its own copies so building the parsers imports neither the pool nor the workloads: they must
    # not drift from what RunSpec and the pool accept
    from app.commands import arg_types
    from app.workloads import spec
    from pool.shrink_types import SHRINK_MODES

    assert arg_types.OPEN_BLOCKS_CHOICES == spec.OPEN_BLOCKS_CHOICES
    assert arg_types.SHRINK_MODES == SHRINK_MODES
