"""The engine's serving extensions, in-process on tiny models: requests joining a running batch, cancelling (waiting,
prefilling, decoding, and inside a pipelined step in flight) with the rows freed and the pool's integrity checked,
a per-request stop condition, per-request seeded sampling, and a request that can never fit handed to ``reject_fn``.
"""

from __future__ import annotations

import pytest

from app.workloads.engine import Engine
from app.workloads.sampling import Sampling
from app.workloads.scenarios import Scenario
from app.workloads.scheduler import Request
from app.workloads.session import build_session
from app.workloads.spec import RunSpec

BACKENDS = ("slab", "monolithic", "dense")
EMPTY = Scenario("serve", "", {}, {}, ())
PROMPT_A = [5 + (i * 7) % 200 for i in range(23)]
PROMPT_B = [9 + (i * 13) % 190 for i in range(41)]
PROMPT_C = [4 + (i * 3) % 150 for i in range(9)]


def session_for(loaded, backend: str, **spec_fields):
    spec = RunSpec(backend=backend, model=loaded.name, block_size=4, slab_blocks=2, prefill_chunk=16,
                   prefix_cache=False, **spec_fields)
    return build_session(spec, EMPTY, loaded=loaded)


def drive(session, limit: int = 400) -> list:
    """Step until idle (bounded), checking integrity after every step; returns the step results."""
    results = []
    for _ in range(limit):
        result = session.engine.step()
        session.check_integrity()
        if result is None:
            return results
        results.append(result)
    raise AssertionError("the engine did not go idle")


def solo(loaded, backend: str, request: Request) -> list[int]:
    session = session_for(loaded, backend)
    try:
        session.scheduler.submit([request])
        drive(session)
        return session.scheduler.finished[0].generated
    finally:
        session.close()


def finished_by_id(session) -> dict:
    return {seq.request.req_id: seq for seq in session.scheduler.finished}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_request_submitted_while_another_decodes_joins_and_both_equal_their_solo_runs(backend, tiny_llama):
    alone_a = solo(tiny_llama, backend, Request(0, PROMPT_A, 12))
    alone_b = solo(tiny_llama, backend, Request(1, PROMPT_B, 6))
    session = session_for(tiny_llama, backend)
    try:
        session.scheduler.set_concurrency(4)
        session.scheduler.submit([Request(0, PROMPT_A, 12)])
        for _ in range(5):  # A prefills, then decodes (pipelined: nothing waits, no stop tokens)
            session.engine.step()
        assert session.scheduler.running[0].generated  # A is decoding when B arrives
        session.scheduler.submit([Request(1, PROMPT_B, 6)])
        results = drive(session)
        done = finished_by_id(session)
        assert done[0].generated == alone_a and done[1].generated == alone_b
        assert any(r.kind == "decode" and r.batch == 2 for r in results)  # they decoded together
        assert {s.finish_reason for s in done.values()} == {"length"}
        assert session.backend.live_sequences() == []
    finally:
        session.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_in_every_state_frees_the_rows_and_the_others_finish_as_alone(backend, tiny_llama):
    alone_a = solo(tiny_llama, backend, Request(0, PROMPT_A, 10))
    session = session_for(tiny_llama, backend)
    try:
        scheduler = session.scheduler
        scheduler.set_concurrency(2)
        scheduler.submit([Request(0, PROMPT_A, 10), Request(1, PROMPT_B, 10), Request(2, PROMPT_C, 10)])
        assert session.engine.cancel([2]) is None  # nothing in flight
        assert [r.req_id for r in scheduler.waiting] == [0, 1]  # the waiting one left the queue
        session.engine.step()  # admits 0 and 1; prefills A's first chunk
        assert 1 in [s.request.req_id for s in scheduler.running] and scheduler.running[1].in_prefill
        session.engine.cancel([1])  # cancelled mid-prefill
        session.check_integrity()
        assert sorted(session.backend.live_sequences()) == [scheduler.running[0].seq_id]
        drive(session)
        done = finished_by_id(session)
        assert done[0].generated == alone_a and done[1].finish_reason == "cancelled"
        assert session.backend.live_sequences() == []
        if session.pool is not None:
            assert session.pool.stats().live_blocks == 0 and session.pool.stats().num_sequences == 0
    finally:
        session.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_completes_a_pipelined_step_in_flight_first(backend, tiny_llama):
    alone_b = solo(tiny_llama, backend, Request(1, PROMPT_B, 9))
    session = session_for(tiny_llama, backend)
    try:
        session.scheduler.set_concurrency(2)
        session.scheduler.submit([Request(0, PROMPT_A, 9), Request(1, PROMPT_B, 9)])
        while not (session.engine._inflight is not None and session.scheduler.running[0].generated):
            assert session.engine.step() is not None
        generated_before = len(session.scheduler.running[1].generated)
        drained = session.engine.cancel([0])
        assert drained is not None and drained.kind == "decode" and drained.batch == 2
        assert session.engine._inflight is None
        assert len(session.scheduler.running[0].generated) == generated_before + 1  # the in-flight token counted
        session.check_integrity()
        drive(session)
        done = finished_by_id(session)
        assert done[0].finish_reason == "cancelled" and done[1].generated == alone_b
    finally:
        session.close()


def test_a_stop_condition_ends_the_request_at_its_token(tiny_llama):
    session = session_for(tiny_llama, "slab")
    try:
        stop = Request(0, PROMPT_A, 20, stop_when=lambda seq: len(seq.generated) == 3)
        session.scheduler.submit([stop])
        drive(session)
        seq = session.scheduler.finished[0]
        assert len(seq.generated) == 3 and seq.finish_reason == "stop"
        assert session.backend.live_sequences() == []
    finally:
        session.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_requests_with_stop_tokens_pipeline_and_stop_where_synchronous_decoding_stops(backend, tiny_llama,
                                                                                        monkeypatch):
    """Stop tokens no longer turn pipelining off: the step after a stop is dispatched ahead, the stopped row of it
    dropped. Each request stops at the same token, with the same tokens, as with pipelining off."""
    free = {r: solo(tiny_llama, backend, Request(r, p, 24)) for r, p in enumerate((PROMPT_A, PROMPT_B, PROMPT_C))}
    stops = {0: free[0][5], 1: free[1][11], 2: -1}  # request 2 never stops early: it runs to its length
    ahead = []
    original = Engine._batch_unchanged_after

    def run(pipelined: bool) -> dict:
        with monkeypatch.context() as patch:
            patch.setattr(Engine, "_batch_unchanged_after",
                          lambda self, plan: ahead.append(original(self, plan) and pipelined) or ahead[-1])
            session = session_for(tiny_llama, backend)
            hooked = []  # the sequences each decode step's logits hook saw: the live ones only
            session.engine.logits_hook = lambda seq_ids, logits: hooked.append((list(seq_ids), logits.shape[0]))
            try:
                session.scheduler.set_concurrency(3)
                session.scheduler.submit([Request(r, p, 24, stop_tokens=frozenset({stops[r]}))
                                          for r, p in enumerate((PROMPT_A, PROMPT_B, PROMPT_C))])
                results = drive(session)
                done = finished_by_id(session)
                assert all(r.batch == r.num_tokens for r in results if r.kind == "decode")
                assert all(len(ids) == rows for ids, rows in hooked)
                return {r: (done[r].generated, done[r].finish_reason) for r in done}, [ids for ids, _ in hooked]
            finally:
                session.close()

    synchronous, sync_hooked = run(False)
    ahead.clear()
    pipelined, hooked = run(True)
    assert pipelined == synchronous and [ids for ids in hooked if ids] == sync_hooked
    assert synchronous[0][1] == "stop" and synchronous[0][0][-1] == stops[0]
    assert synchronous[1][1] == "stop" and synchronous[2] == (free[2], "length")
    assert any(ahead)  # the pipeline ran with stop tokens set


def sampled(loaded, requests: list[Request], backend: str = "slab") -> dict[int, list[int]]:
    session = session_for(loaded, backend)
    try:
        session.scheduler.set_concurrency(len(requests))
        session.scheduler.submit(requests)
        drive(session)
        return {seq.request.req_id: seq.generated for seq in session.scheduler.finished}
    finally:
        session.close()


def test_a_seeded_request_draws_the_same_tokens_alone_and_in_a_mixed_batch(tiny_qwen3):
    hot = Sampling(temperature=1.5, top_p=0.95, seed=1234)
    alone = sampled(tiny_qwen3, [Request(0, PROMPT_A, 16, sampling=hot)])[0]
    mixed = sampled(tiny_qwen3, [Request(1, PROMPT_B, 16, sampling=Sampling(temperature=0.9, seed=7)),
                                 Request(0, PROMPT_A, 16, sampling=hot), Request(2, PROMPT_C, 16)])
    assert mixed[0] == alone
    other_seed = sampled(tiny_qwen3, [Request(0, PROMPT_A, 16, sampling=Sampling(1.5, 0.95, seed=99))])[0]
    greedy = sampled(tiny_qwen3, [Request(0, PROMPT_A, 16)])[0]
    assert alone != other_seed and alone != greedy  # temperature 1.5 on a random model: the draws matter


def test_greedy_and_nucleus_of_one_token_equal_the_default_greedy_sampler(tiny_qwen3):
    greedy = sampled(tiny_qwen3, [Request(0, PROMPT_A, 12)])[0]
    explicit = sampled(tiny_qwen3, [Request(0, PROMPT_A, 12, sampling=Sampling(0.0, 1.0, 5))])[0]
    narrow = sampled(tiny_qwen3, [Request(0, PROMPT_A, 12, sampling=Sampling(2.0, 1e-9, 5)),
                                  Request(1, PROMPT_B, 12, sampling=Sampling(2.0, 1.0, 5))])[0]
    assert explicit == greedy and narrow == greedy


def test_a_request_that_cannot_fit_an_empty_pool_goes_to_reject_fn_and_the_next_one_runs(tiny_llama):
    session = session_for(tiny_llama, "slab", max_blocks_per_layer=8)  # 8 blocks of 4 tokens: 32 tokens
    rejected = []
    session.scheduler.reject_fn = rejected.append
    try:
        session.scheduler.submit([Request(0, PROMPT_B, 4), Request(1, PROMPT_C, 4)])  # 41 + 4 tokens do not fit
        drive(session)
        assert [r.req_id for r in rejected] == [0]
        assert [s.request.req_id for s in session.scheduler.finished] == [1]
    finally:
        session.close()
