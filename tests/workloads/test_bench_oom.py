"""``bench throughput`` when one engine runs out of memory (seen on the H200: mlx-lm's BatchGenerator after dense's
run in the same process, and the bench died with a traceback): that engine's runs say "out of memory" (progress,
table, --json) and the other engines' figures still print; after every warm run what it left is released and the
progress line says how much and what the process holds then. The failure is injected on the CPU with MLX's own
allocator texts (app/bench/engine_memory.py cites them)."""

from __future__ import annotations

import json

import pytest

import app.bench.mlxlm_baseline as baseline
from app.bench.engine_memory import is_out_of_memory
from app.bench.throughput import EngineFailed, fresh_result

TINY = ["bench", "throughput", "--model", "synthetic:tiny-llama", "--scenario", "distinct_burst", "--set", "n=2",
        "--set", "prompt_tokens=16", "--set", "gen_tokens=2", "--engines", "dense,mlx_lm", "--fresh-rounds", "0"]
MLX_TEXTS = ["[malloc] Unable to allocate 1073741824 bytes.", "cudaMallocAsync failed: out of memory",
             "[metal::malloc] Attempting to allocate 96905199616 bytes which is greater than the maximum allowed "
             "buffer size of 17179869184 bytes.", "[metal::malloc] Resource limit (499000) exceeded.",
             "[METAL] Command buffer execution failed: Insufficient Memory "
             "(00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"]
CACHED = 16 * 2**20  # what the failing engine leaves in MLX's cache before it fails (16 buffers of 1 MiB: the CPU
                     # allocator hands a single buffer this large straight back to the system)


@pytest.mark.parametrize("text", MLX_TEXTS)
def test_mlx_allocation_failures_are_out_of_memory(text):
    assert is_out_of_memory(RuntimeError(text)) and is_out_of_memory(text)


@pytest.mark.parametrize("error", [RuntimeError("[reshape] Cannot reshape array of size 6 into shape (4,)"),
                                   ValueError("[malloc] Unable to allocate 8 bytes."), KeyError("memory")])
def test_other_failures_are_not(error):
    assert not is_out_of_memory(error)
    assert is_out_of_memory(MemoryError())


@pytest.fixture
def failing_mlx_lm(monkeypatch):
    """mlx-lm's engine leaves CACHED bytes in MLX's buffer cache, then fails as MLX's allocator does."""
    import mlx.core as mx

    def run(*_args, **_kwargs):
        blocks = [mx.arange(2**18, dtype=mx.float32) + k for k in range(CACHED // 2**20)]  # real buffers
        mx.eval(blocks)
        del blocks  # freed into MLX's cache: what a failed run leaves behind
        raise RuntimeError("[malloc] Unable to allocate 1073741824 bytes.")

    monkeypatch.setattr(baseline, "run_batchgenerator", run)


def test_an_engine_out_of_memory_is_its_result_and_the_others_still_print(cli, failing_mlx_lm):
    code, out, err = cli([*TINY, "--rounds", "2", "--json"])
    assert code == 0, err[-5:]
    result = json.loads(out)
    mlx_lm_runs = [result["warmup_round"]["mlx_lm"], *result["rounds"]["mlx_lm"]]
    assert [run["error"] for run in mlx_lm_runs] == ["out of memory"] * 3
    assert all("[malloc] Unable to allocate 1073741824 bytes." in run["detail"] for run in mlx_lm_runs)
    assert result["warm"]["mlx_lm"] == {"out_of_memory": {"runs": 2, "of": 2, "detail": mlx_lm_runs[1]["detail"]}}
    assert result["warm"]["dense"]["tok_s"]["n"] == 2 and result["rounds"]["dense"][0]["tok_s"] > 0
    assert not any(v["a"] == "mlx_lm" or v["b"] == "mlx_lm" for v in result["verdicts"]["warm"])
    failed = [line for line in err  # each run's line starts with "[k/N] " (app/bench/progress.py)
              if line.split("] ", 1)[-1].startswith("round 1 mlx_lm: out of memory (RuntimeError: [malloc] Unable")]
    assert len(failed) == 1 and "; released " in failed[0] and "process now: MLX active" in failed[0]


def test_what_a_run_leaves_is_released_before_the_next_engine(cli, failing_mlx_lm):
    code, out, _ = cli([*TINY, "--rounds", "1", "--json"])
    result = json.loads(out)
    released = result["rounds"]["mlx_lm"][0]["released"]
    assert code == 0 and released["cache_before"] >= CACHED and released["cache_after"] == 0
    assert released["rss_after"] > 0
    assert result["rounds"]["dense"][0]["released"]["cache_after"] == 0


def test_the_table_says_out_of_memory_in_the_engines_row(cli, failing_mlx_lm):
    code, out, _ = cli([*TINY, "--rounds", "1"])
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith(("dense ", "mlx_lm "))}
    assert code == 0 and "out of memory" not in rows["dense"] and rows["dense"].split()[1] != "-"
    assert "out of memory in 1 of 1 runs (RuntimeError: [malloc] Unable to allocate" in rows["mlx_lm"]


def test_a_fresh_process_out_of_memory_is_its_result_and_any_other_failure_one_line():
    text = "RuntimeError: cudaMallocAsync failed: out of memory"
    assert fresh_result("mlx_lm", {"error": text}) == {"error": "out of memory", "detail": text}
    assert fresh_result("dense", {"ok": {"tok_s": 1.0}}) == {"tok_s": 1.0}
    with pytest.raises(EngineFailed, match="fresh dense run failed: ValueError: bad prompt"):
        fresh_result("dense", {"error": "ValueError: bad prompt"})
