"""Scheduling: admission, chunked prefill, batched decode, completion, release and reuse of pool rows."""

import pytest

from app.workloads.scheduler import DecodeBatch, PrefillPlan, Request, Scheduler
from probes.events import RequestDone, Step

from .helpers import write_scenario


class FakeBackend:
    """Admits up to ``capacity`` sequences at once; records releases."""

    def __init__(self, capacity=99):
        self.capacity = capacity
        self.live, self.released = set(), []

    def admit(self, seq):
        if len(self.live) >= self.capacity:
            return False
        self.live.add(seq.seq_id)
        return True

    def release(self, seq):
        self.live.remove(seq.seq_id)
        self.released.append(seq.seq_id)


def _sched(chunk=4, capacity=99):
    backend = FakeBackend(capacity)
    return Scheduler(prefill_chunk=chunk, admit_fn=backend.admit, release_fn=backend.release), backend


def test_prefill_chunks_are_aligned_and_exclude_the_last_prompt_token():
    sched, _ = _sched(chunk=4)
    sched.submit([Request(0, list(range(11)), 2)])
    sched.admit()
    spans = []
    while isinstance(plan := sched.plan(), PrefillPlan):
        spans.append((plan.start, plan.num_tokens))
        sched.complete_prefill(plan)
    assert spans == [(0, 4), (4, 4), (8, 2)]  # 10 = len - 1 tokens; the 11th is the first decode input
    assert isinstance(plan, DecodeBatch) and plan.starts == [10]


def _prefill_steps(sched):
    """Run the prefill plans to decode: per step, (request ids, start, tokens per sequence)."""
    steps = []
    while isinstance(plan := sched.plan(), PrefillPlan):
        steps.append(([s.request.req_id for s in plan.seqs], plan.start, plan.num_tokens))
        sched.complete_prefill(plan)
    return steps


def test_a_prefill_step_batches_the_chunks_of_the_same_shape_within_its_token_budget():
    """Sequences at the same start with the same chunk length prefill in one step, in admission order, as many as
    the token budget holds; a ragged prompt parts at its last, shorter chunk; a later admission waits its turn."""
    backend = FakeBackend()
    sched = Scheduler(prefill_chunk=4, admit_fn=backend.admit, release_fn=backend.release, prefill_batch_tokens=12)
    sched.set_concurrency(8)
    # prompts of 11, 11, 7, 11, 9 tokens: 10, 10, 6, 10, 8 prefilled
    sched.submit([Request(i, list(range(n)), 2) for i, n in enumerate([11, 11, 7, 11, 9])])
    sched.admit()
    assert _prefill_steps(sched) == [
        ([0, 1, 2], 0, 4),  # 12 tokens: the budget is full, 3 and 4 wait
        ([0, 1], 4, 4),     # the oldest prefilling sequence leads; 2 (6 tokens) has a chunk of 2 at 4
        ([0, 1], 8, 2),
        ([2], 4, 2),
        ([3, 4], 0, 4),
        ([3, 4], 4, 4),     # 4 (8 tokens) ends with a full chunk, 3 has 2 more
        ([3], 8, 2),
    ]
    sched.check_integrity()


def test_without_a_token_budget_each_prefill_step_takes_one_sequence():
    sched, _ = _sched(chunk=4)
    sched.set_concurrency(3)
    sched.submit([Request(i, list(range(9)), 2) for i in range(3)])
    sched.admit()
    assert [ids for ids, _, _ in _prefill_steps(sched)] == [[0], [0], [1], [1], [2], [2]]
    with pytest.raises(ValueError, match="prefill_batch_tokens"):
        Scheduler(prefill_chunk=4, admit_fn=None, release_fn=None, prefill_batch_tokens=-1)


def test_concurrency_fifo_admission_and_different_finish_times():
    sched, backend = _sched(chunk=64)
    sched.set_concurrency(2)
    sched.submit([Request(i, [5, 6, 7], gen) for i, gen in enumerate([1, 4, 2])])
    assert [s.seq_id for s in sched.admit()] == [0, 1] and len(sched.waiting) == 1
    finished_at = {}
    for step in range(20):
        sched.admit()
        plan = sched.plan()
        if plan is None:
            break
        if isinstance(plan, PrefillPlan):
            sched.complete_prefill(plan)
            continue
        for seq in sched.complete_decode(plan, [1] * len(plan.seqs)):
            finished_at[seq.request.req_id] = step
        sched.check_integrity()
    assert sched.idle() and backend.live == set()
    assert finished_at[0] < finished_at[2] < finished_at[1]
    assert backend.released == [0, 2, 1]
    assert [len(s.generated) for s in sorted(sched.finished, key=lambda s: s.request.req_id)] == [1, 4, 2]


def test_admission_waits_for_capacity_then_errors_when_nothing_can_ever_fit():
    sched, backend = _sched(capacity=1)
    sched.set_concurrency(3)
    sched.submit([Request(0, [1, 2], 1), Request(1, [3, 4], 1)])
    assert len(sched.admit()) == 1 and len(sched.waiting) == 1  # waits, no error while something runs
    backend.capacity = 0
    sched.finish(sched.running[0])
    with pytest.raises(RuntimeError, match="does not fit the pool budget"):
        sched.admit()
    assert len(sched.waiting) == 1  # the request is still there, unchanged


def test_stop_tokens_end_a_request_early():
    sched, _ = _sched()
    sched.submit([Request(0, [9], 10, stop_tokens=frozenset({0}))])
    sched.admit()
    plan = sched.plan()
    assert isinstance(plan, DecodeBatch)
    assert sched.complete_decode(plan, [0])[0].generated == [0]


def test_bad_requests_are_rejected():
    with pytest.raises(ValueError):
        Request(0, [], 1)
    with pytest.raises(ValueError):
        Request(0, [1], 0)


CHURN = """
[params]
n = 10
[[phases]]
name = "churn"
kind = "requests"
count = "$n"
concurrency = 3
prompt_tokens = [4, 60]
gen_tokens = [1, 24]
"""


@pytest.mark.parametrize("backend", ["slab", "monolithic"])
def test_rows_are_freed_and_reused_with_integrity_after_every_step(backend, tiny_llama, tmp_path):
    from app.workloads.scenarios import load_scenario
    from app.workloads.session import build_session
    from app.workloads.spec import RunSpec

    spec = RunSpec(scenario=write_scenario(tmp_path, CHURN), backend=backend, block_size=4, slab_blocks=4,
                   prefill_chunk=16, prefix_cache=False)
    scenario = load_scenario(spec.scenario)
    session = build_session(spec, scenario, loaded=tiny_llama)
    try:
        _check_rows_freed_and_reused(spec, scenario, session)
    finally:
        session.close()  # restores mlx-lm's attention in the model module (a later test's dense run reads it)


def _check_rows_freed_and_reused(spec, scenario, session) -> None:
    from app.workloads.runner import _Runner

    events = []
    summary = _Runner(spec, scenario, session, events.append, lambda s, t: None, None, True).run()
    pool = session.pool
    assert pool.sequence_ids() == [] and pool.stats().live_blocks == 0  # nothing left live
    pool.check_integrity()
    counters = pool.snapshot().counters
    assert counters.rows_reused > 0 and counters.rows_minted > 0
    finish_steps = sorted(s.request.req_id for s in session.scheduler.finished)
    assert finish_steps == list(range(10)) and summary["requests_finished"] == 10
    order = [s.request.req_id for s in session.scheduler.finished]
    assert order != sorted(order)  # finished in a different order than admitted
    kinds = [e.kind for e in events]
    assert kinds.count("step") == summary["steps"] and kinds[0] == "phase"
    done = [e for e in events if isinstance(e, RequestDone)]  # one event per finished request, in finish order
    assert [e.req_id for e in done] == order and all(e.generated_tokens > 0 and e.prompt_tokens > 0 for e in done)


def test_budget_makes_requests_wait_and_never_fails_mid_run(tiny_llama, tmp_path):
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    # each request needs ceil((40 + 20) / 4) = 15 blocks; a 32-block budget holds two of the three allowed
    fixed = CHURN.replace("[4, 60]", "40").replace("[1, 24]", "20")
    spec = RunSpec(scenario=write_scenario(tmp_path, fixed), backend="slab", block_size=4, slab_blocks=4,
                   prefill_chunk=16, max_blocks_per_layer=32)
    batches = []
    summary = run_workload(spec, lambda e: batches.append(e.batch) if isinstance(e, Step) else None,
                           loaded=tiny_llama, check_integrity=True)
    assert summary["requests_finished"] == 10 and max(batches) == 2


def test_a_prompt_larger_than_the_budget_errors_clearly(tiny_llama, tmp_path):
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    spec = RunSpec(scenario=write_scenario(tmp_path, CHURN), backend="slab", block_size=4,
                   max_blocks_per_layer=3)
    with pytest.raises(RuntimeError, match="does not fit the pool budget"):
        run_workload(spec, lambda e: None, loaded=tiny_llama)
