"""multiturn keeps the conversation's K/V between turns (partial last block included) and the next turn adopts
it, so its first write into the shared partial block is copied on write. The dense baseline follows the same
schedule (mlx-lm's KVCache extracted from the batch and extended by the next turn), so all three backends are
byte-identical: logits at every decode step (mx.array_equal) and tokens."""

import pytest

from pool.ops import Adopt, CopyOnWrite
from probes.events import Done, OpBatch

from .helpers import assert_same_logits

# 3 turns: 21 user tokens then 5 generated; with 8-token blocks every kept turn ends inside a block
OVERRIDES = {"turns": 3, "user_tokens": 21, "gen_tokens": 5}
BLOCK = 8


def _run(loaded, backend):
    """Run multiturn with integrity checks after every step; returns (session after close, summary, logits, ops)."""
    from app.workloads.runner import _Runner
    from app.workloads.scenarios import load_scenario
    from app.workloads.session import build_session
    from app.workloads.spec import RunSpec

    spec = RunSpec(scenario="multiturn", backend=backend, overrides=OVERRIDES, block_size=BLOCK, slab_blocks=2,
                   prefill_chunk=16)
    scenario = load_scenario(spec.scenario, spec.overrides)
    logits, ops = [], []
    session = build_session(spec, scenario, loaded=loaded, logits_hook=lambda ids, lg: logits.append((ids, lg)))
    if session.pool is not None:
        session.pool.add_op_listener(ops.append)
    try:
        summary = _Runner(spec, scenario, session, lambda e: None, lambda s, t: None, None, True).run()
    finally:
        session.close()
    return session, summary, logits, ops


@pytest.fixture(scope="module")
def runs(tiny_llama):
    return {backend: _run(tiny_llama, backend) for backend in ("slab", "monolithic", "dense")}


@pytest.mark.parametrize("backend", ["slab", "monolithic"])
def test_next_turn_copies_the_shared_partial_block_and_nothing_leaks(runs, backend):
    session, summary, _, ops = runs[backend]
    turns = sorted(session.scheduler.finished, key=lambda s: s.request.req_id)
    assert [t.num_shared for t in turns] == [0, len(turns[0].tokens) - 1, len(turns[1].tokens) - 1]
    assert all(t.num_shared % BLOCK for t in turns[1:])  # each resumed state ends inside a block
    cows = [op for op in ops if isinstance(op, CopyOnWrite)]
    # the first write of turns 2 and 3 lands in the kept partial block: one copy each, in every layer
    assert [(op.seq, op.logical_block) for op in cows] == [(t.seq_id, t.num_shared // BLOCK) for t in turns[1:]]
    assert summary["pool"]["counters"]["cow_copies"] == len(cows) * session.loaded.num_layers
    adopts = [op for op in ops if isinstance(op, Adopt)]
    assert [op.seq for op in adopts] == [t.seq_id for t in turns[1:]]
    assert summary["conversations"] == {"resumed_turns": 2, "resumed_tokens": sum(t.num_shared for t in turns),
                                        "kept": 0}  # the last turn keeps nothing and drops its checkpoint
    stats = session.pool.stats()
    assert session.pool.sequence_ids() == [] and stats.live_blocks == 0 and stats.num_handles == 0
    session.pool.check_integrity()


@pytest.mark.numerics
def test_slab_monolithic_and_dense_are_byte_identical(runs):
    tokens = {b: [s.tokens for s in sorted(r[0].scheduler.finished, key=lambda s: s.request.req_id)]
              for b, r in runs.items()}
    assert tokens["slab"] == tokens["monolithic"] == tokens["dense"]
    assert runs["dense"][1]["conversations"]["resumed_turns"] == 2  # the same schedule, resumed on dense too
    assert_same_logits(runs["slab"][2], runs["monolithic"][2], "slab vs monolithic")
    assert_same_logits(runs["slab"][2], runs["dense"][2], "slab vs dense")


def test_a_kept_conversation_is_not_resumed_by_a_prompt_that_does_not_continue_it():
    from app.workloads.conversations import PagedConversations
    from app.workloads.scheduler import Request, Sequence
    from pool.bookkeeping import BlockBook

    book = BlockBook(1, 4, "slab", 2, None, 0)
    book.add_sequence(0)
    book.prepare_write(0, 0, 6)
    store = PagedConversations(book)
    first = Sequence(0, Request(0, [1, 2, 3, 4, 5, 6, 7], 1, kv_key="c", keep_kv=True), [1, 2, 3, 4, 5, 6, 7], 6)
    store.keep_or_release(first)
    assert book.sequence_ids() == [] and len(book.handles) == 1
    other = Request(1, [9, 2, 3, 4, 5, 6, 7, 8], 1, kv_key="c")
    assert store.adopt(Sequence(1, other, list(other.prompt))) == 0  # tokens differ: nothing adopted
    assert book.sequence_ids() == []
    follow = Request(2, [1, 2, 3, 4, 5, 6, 7, 8], 1, kv_key="c")
    assert store.adopt(Sequence(2, follow, list(follow.prompt))) == 6 and book.seq_length(2) == 6
    store.clear()
    book.release(2)
    assert book.sequence_ids() == [] and not book.handles
    book.check_integrity()


def test_cow_reaches_the_event_stream_through_the_worker_sink(tiny_llama):
    """The worker's event path (probes sink, in-process): ``op`` events carry the ``cow`` ops, and the final
    pool snapshot counts them."""
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec
    from app.workloads.worker_sink import make_sink

    events = []
    spec = RunSpec(scenario="multiturn", backend="slab", overrides=OVERRIDES, block_size=BLOCK, slab_blocks=2,
                   prefill_chunk=16, sample_hz=0, snapshot_hz=50)
    sink = make_sink(events.append, spec)
    summary = run_workload(spec, sink.emit, sink.tick, None, loaded=tiny_llama, attach=sink.attach)
    sink.finish(summary)
    cows = [op for e in events if isinstance(e, OpBatch) for op in e.ops if isinstance(op, CopyOnWrite)]
    assert len(cows) == 2 and all(op.num_layers == tiny_llama.num_layers for op in cows)
    assert summary["pool"]["counters"]["cow_copies"] == 2 * tiny_llama.num_layers
    assert isinstance(events[-1], Done)


def test_multiturn_under_a_tight_budget_resumes_without_hitting_it(tiny_llama):
    """Admission counts a resumed turn's shared full blocks as held (not new) and its partial block as a copy to
    come: with a budget of one turn's final size plus the kept checkpoint's partial block, every turn still runs."""
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    # final turn: 3 * 21 prompt + 2 * 5 earlier replies + 5 generated = 78 tokens -> 10 blocks; +1 partial copy
    spec = RunSpec(scenario="multiturn", backend="slab", overrides=OVERRIDES, block_size=BLOCK, slab_blocks=2,
                   prefill_chunk=16, max_blocks_per_layer=11)
    summary = run_workload(spec, lambda e: None, loaded=tiny_llama, check_integrity=True)
    assert summary["requests_finished"] == 3 and summary["conversations"]["resumed_turns"] == 2
    assert summary["pool"]["counters"]["cow_copies"] == 2 * tiny_llama.num_layers
