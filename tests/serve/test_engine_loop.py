"""The engine worker's loop in this process (app/serve/worker.py ``EngineLoop``, queues instead of a pipe): it
answers Ready, Accepted/Rejected and Tokens in order, and its recording rotates into segments that each open on
their own (META, a keyframe first, END naming the next), keeps only the newest ones, and loses no request event
across a rotation."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import pytest

from app.serve import protocol as proto
from app.serve.config import ServeLimits, WorkerConfig
from app.serve.worker import EngineLoop
from app.workloads.spec import RunSpec
from probes.events import RequestArrived, RequestDone
from probes.replay import Session


class Loop:
    """An EngineLoop on a thread, fed and read through queues."""

    def __init__(self, config: WorkerConfig) -> None:
        self.to_engine, self.to_front, self.probes = queue.Queue(), queue.Queue(), queue.Queue(maxsize=4096)
        self.stop = threading.Event()
        self.loop = EngineLoop(config, self.to_engine, self.to_front, self.probes, self.stop)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.loop.run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def send(self, message) -> None:
        self.to_engine.put(proto.encode(message))

    def receive(self, timeout: float = 60.0):
        return proto.decode_for_front(self.to_front.get(timeout=timeout))

    def shutdown(self) -> None:
        self.send(proto.Shutdown())
        self.thread.join(60)
        assert not self.thread.is_alive() and self.error is None, self.error


def config(tmp_path, **fields) -> WorkerConfig:
    spec = RunSpec(scenario="serve", backend=fields.pop("backend", "slab"), model="synthetic:tiny-llama",
                   block_size=8, slab_blocks=4, prefix_cache=False, sample_hz=50.0, snapshot_hz=50.0)
    return WorkerConfig(spec=spec, limits=ServeLimits(max_running=4), record_dir=str(tmp_path), **fields)


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.02)


def serve_requests(loop: Loop, count: int, max_tokens: int = 12, first: int = 1) -> dict[int, list[int]]:
    """Submit ``count`` requests (ids from ``first``); every token each got, once all have finished."""
    if first == 1:
        assert isinstance(loop.receive(), proto.Ready)
    for rid in range(first, first + count):
        loop.send(proto.Submit(rid=rid, prompt=f"request {rid} " * 3, max_tokens=max_tokens, ignore_eos=True))
    tokens: dict[int, list[int]] = {}
    finished = set()
    while len(finished) < count:
        message = loop.receive()
        if isinstance(message, proto.Accepted):
            tokens[message.rid] = []
        elif isinstance(message, proto.Tokens):
            for item in message.items:
                assert item.rid in tokens, "tokens before the request was accepted"
                tokens[item.rid] += item.ids
                if item.finish:
                    finished.add(item.rid)
        else:
            raise AssertionError(f"unexpected {message}")
    return tokens


@pytest.mark.parametrize("backend", ["slab", "dense"])
def test_the_recording_rotates_into_segments_that_open_alone_and_lose_no_event(tmp_path, backend):
    loop = Loop(config(tmp_path, backend=backend, segment_bytes=1, keep_segments=3))  # rotate at every write
    tokens = {}
    for wave in range(4):  # each wave ends in a segment of its own (a file write comes every half second)
        tokens.update(serve_requests(loop, 6, first=wave * 6 + 1))
        wait_for(lambda: loop.loop.segments.number > wave)
    loop.shutdown()
    assert sorted(tokens) == list(range(1, 25)) and all(len(ids) == 12 for ids in tokens.values())
    segments = loop.loop.segments
    assert segments.number >= 3, "the run should have rotated at least three times"
    files = sorted(Path(tmp_path).glob("*.slabrec"))
    assert files == segments.created and len(files) == 3  # older ones removed, the newest three kept
    sessions = [Session.open(f) for f in files]
    for session, following in zip(sessions, files[1:] + [None]):
        assert session.complete and session.damage is None
        assert session.summary.summary.get("continued_in") == (following.name if following else None)
        assert session.meta["serve"]["segment"] == int(session.path[-11:-8])
        if backend == "slab":  # a pool's segment starts with a keyframe: any instant of it rebuilds on its own
            first = session.keyframes[0].load()
            assert first.book_state is not None and first.op_index == 0 and first.t <= session.snapshots[0].t
            assert all(entry.t >= first.t for entry in session.all_ops())  # no op from before the split
            assert session.snapshot_at(session.duration) is not None
    arrived = [e.req_id for s in sessions for e in s.events_of(RequestArrived)]
    done = [e.req_id for s in sessions for e in s.events_of(RequestDone)]
    assert done[-1] == 24 and set(arrived) <= set(done)  # what the kept segments saw arrive, they saw finish
    assert sessions[-1].summary.summary["serve"]["requests_finished"] == 24


@pytest.mark.parametrize("backend", ["slab", "monolithic", "dense"])
def test_a_request_that_cannot_fit_is_rejected_before_any_token_and_the_rest_served(tmp_path, backend):
    loop = Loop(config(tmp_path, backend=backend))
    assert isinstance(loop.receive(), proto.Ready)
    loop.send(proto.Submit(rid=1, prompt="x" * 5000, max_tokens=4))  # tiny-llama has 4096 positions
    loop.send(proto.Submit(rid=2, prompt="fine", max_tokens=3, ignore_eos=True))
    rejected = loop.receive()
    assert isinstance(rejected, proto.Rejected) and rejected.status == 400 and \
        rejected.code == "context_length_exceeded"
    assert isinstance(loop.receive(), proto.Accepted)
    loop.send(proto.Inspect(qid=9))
    seen = []
    while True:
        message = loop.receive()
        seen.append(message)
        if isinstance(message, proto.State):
            break
    assert message.state["integrity"] == "ok"
    while not any(isinstance(m, proto.Tokens) and any(i.finish for i in m.items) for m in seen):
        seen.append(loop.receive())
    assert sum(len(i.ids) for m in seen if isinstance(m, proto.Tokens) for i in m.items) == 3
    loop.shutdown()
