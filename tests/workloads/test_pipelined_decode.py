"""Pipelined decode (Engine dispatches step t+1 from step t's lazy tokens when the batch cannot change).

The pipelined run must produce the same bytes as the synchronous one (every step's logits seen by the hook,
mx.array_equal), and must pipeline exactly the steps whose batch is known not to change: fixed lengths, no
stop tokens, nothing admissible waiting.
"""

import pytest

from app.workloads.engine import Engine

from .helpers import BACKENDS, assert_same_logits, burst_toml, run_backend, write_scenario


def _run(loaded, scenario, backend, monkeypatch, *, pipelined: bool):
    """One run; returns (summary, logits per step, [was the successor dispatched ahead?] per decode step)."""
    decisions = []
    original = Engine._batch_unchanged_after

    def spy(self, plan):
        ahead = original(self, plan) and pipelined
        decisions.append(ahead)
        return ahead

    with monkeypatch.context() as patch:
        patch.setattr(Engine, "_batch_unchanged_after", spy)
        summary, _, logits = run_backend(loaded, scenario, backend, block_size=4, slab_blocks=2, prefill_chunk=16)
    return summary, logits, decisions


@pytest.mark.numerics
@pytest.mark.parametrize("backend", BACKENDS)
def test_pipelined_decode_is_byte_identical_to_synchronous(backend, tiny_qwen3, tmp_path, monkeypatch):
    # 3 running, 5 requests of different lengths: joins and leaves break the pipeline at known steps
    scenario = write_scenario(tmp_path, burst_toml(n=5, concurrency=3, prompt_tokens="[3, 40]",
                                                   gen_tokens="[2, 9]"))
    sync_summary, sync_logits, _ = _run(tiny_qwen3, scenario, backend, monkeypatch, pipelined=False)
    summary, logits, ahead = _run(tiny_qwen3, scenario, backend, monkeypatch, pipelined=True)
    assert_same_logits(logits, sync_logits, f"{backend} pipelined vs synchronous")
    assert summary["decode_tokens"] == sync_summary["decode_tokens"]
    assert summary["requests_finished"] == 5
    assert any(ahead) and not all(ahead)  # some steps overlapped, the batch-changing ones did not


def test_pipeline_stops_before_fixed_length_end(tiny_llama, tmp_path, monkeypatch):
    """Two sequences of 5 generated tokens decoding together: steps 1-4 dispatch their successor ahead, the
    fifth (last token for both) does not, and nothing is left in flight."""
    scenario = write_scenario(tmp_path, burst_toml(n=2, concurrency=2, prompt_tokens="8", gen_tokens="5"))
    summary, logits, ahead = _run(tiny_llama, scenario, "slab", monkeypatch, pipelined=True)
    assert [ids for ids, _ in logits] == [[0, 1]] * 5
    assert ahead == [True, True, True, True, False]
    assert summary["decode_tokens"] == 10 and summary["requests_finished"] == 2


def test_no_pipelining_while_a_request_waits_for_admission(tiny_llama, tmp_path, monkeypatch):
    """concurrency 1 with a second request waiting: the first one's steps still pipeline (the running set is
    full), and its last step does not (the waiting request joins after it)."""
    scenario = write_scenario(tmp_path, burst_toml(n=2, concurrency=1, prompt_tokens="8", gen_tokens="3"))
    _, logits, ahead = _run(tiny_llama, scenario, "dense", monkeypatch, pipelined=True)
    assert [ids for ids, _ in logits] == [[0]] * 3 + [[1]] * 3
    assert ahead == [True, True, False, True, True, False]


@pytest.mark.parametrize("backend", ["slab", "dense"])
def test_the_last_prefill_chunk_is_awaited_by_its_prefill_step_not_the_first_decode_step(backend, tiny_llama,
                                                                                          tmp_path, monkeypatch):
    """A prefill chunk left in flight when decode starts made the first decode step's wall time count the chunk's
    device time. The prefill step whose successor is a decode step awaits its own chunk, so every decode step
    starts with no prefill in flight (the two prompts prefill in 16-token chunks, then decode together)."""
    scenario = write_scenario(tmp_path, burst_toml(n=2, concurrency=2, prompt_tokens="40", gen_tokens="4"))
    in_flight = []
    dispatch = Engine._dispatch

    def spy(self, plan, starts, inputs):
        in_flight.append(self._prefill_inflight is not None)
        return dispatch(self, plan, starts, inputs)

    monkeypatch.setattr(Engine, "_dispatch", spy)
    summary, _, _ = run_backend(tiny_llama, scenario, backend, block_size=4, slab_blocks=2, prefill_chunk=16)
    assert summary["decode_tokens"] == 8 and in_flight and not any(in_flight)
