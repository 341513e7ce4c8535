"""``slabscope serve`` on the embedded SmolLM2 (CPU), driven by the official ``openai`` client: four concurrent chats,
whole and streamed, equal ``slabscope generate`` (greedy, same backend) and were batched together; the client's own
exception types for the server's errors; SIGTERM stops the server and leaves no process. (Bad inputs, disconnects,
queueing and sampling run on a tiny model: test_serve_tiny.py.)

One server for the module, recording into a temporary directory: the test reads what the engine did (batches,
arrivals, finish reasons) from the recording it writes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from probes.events import RequestArrived, RequestDone, Step
from probes.replay import Session

from .server_proc import post_raw, serve, wait_recorded, wait_state

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.slow

QUESTIONS = ["What is the capital of France?", "Name three primary colours.", "What is 2 + 2?",
             "Write one sentence about the sea."]
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    record = tmp_path_factory.mktemp("serve-record")
    proc = serve("--backend", "slab", "--record", str(record))
    proc.record_dir = record
    yield proc
    assert proc.stop() == 0
    assert "slabscope serve: stopped" in proc.output[-1]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def recording(server) -> Session:
    """What the engine recorded so far (a file still being written opens up to its last whole record)."""
    files = sorted(Path(server.record_dir).glob("*.slabrec"))
    assert len(files) == 1, files
    return Session.open(files[0])


def assert_pool_clean(server) -> dict:
    """The engine holds no request and no sequence, and its integrity checks pass."""
    state = wait_state(server, lambda s: not s["running"] and not s["waiting"])
    assert state["integrity"] == "ok", state
    assert state["live_sequences"] == [] and state["pool"]["num_sequences"] == 0, state
    return state


@pytest.fixture(scope="module")
def expected():
    """``slabscope generate``'s answers (same code path: greedy, the slab backend, the chat template)."""
    from app.commands.generate import generate, prompt_ids

    from workloads.helpers import load

    loaded = load("smollm2-135m")
    out = {}
    for question in QUESTIONS:
        ids = generate(loaded, prompt_ids(loaded.tokenizer, question, True), backend="slab", max_tokens=MAX_TOKENS)
        out[question] = loaded.tokenizer.decode(ids)
    return out


def chat(client, question: str, stream: bool) -> str:
    messages = [{"role": "user", "content": question}]
    if not stream:
        answer = client.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=MAX_TOKENS,
                                                temperature=0)
        return answer.choices[0].message.content
    parts = client.chat.completions.create(model="smollm2-135m", messages=messages, max_tokens=MAX_TOKENS,
                                           temperature=0, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in parts if chunk.choices)


def test_four_concurrent_chats_whole_and_streamed_equal_generate(server, client, expected):
    jobs = [(q, i % 2 == 1) for i, q in enumerate(QUESTIONS)]  # two whole answers, two streamed, all at once
    with ThreadPoolExecutor(len(jobs)) as pool:
        answers = list(pool.map(lambda job: chat(client, *job), jobs))
    for (question, stream), answer in zip(jobs, answers):
        assert answer == expected[question], f"stream={stream} {question!r}"
    assert_pool_clean(server)
    session = wait_recorded(server.record_dir, lambda s: len(s.events_of(RequestDone)) >= len(jobs))
    assert max(s.batch for s in session.events_of(Step) if s.type == "decode") >= 2  # they shared decode steps
    assert len(session.events_of(RequestArrived)) >= len(jobs)
    assert {e.finish_reason for e in session.events_of(RequestDone)} <= {"stop", "length"}


def test_models_and_an_unknown_route(server, client):
    assert [m.id for m in client.models.list().data] == ["smollm2-135m"]
    status, body = post_raw(server.url + "/v1/models", b"{}")  # a GET-only route: an OpenAI-style error too
    assert status == 405 and "Method Not Allowed" in body["error"]["message"]


def test_the_openai_client_sees_the_errors_as_its_own_exceptions(server, client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="maximum context length"):  # 8192 positions
        client.completions.create(model="smollm2-135m", prompt="word " * 9000, max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=8190)
    assert_pool_clean(server)
