"""``slabscope serve`` on a tiny synthetic model (CPU, milliseconds per step): every bad input gets its OpenAI-style
error and changes nothing (the engine's integrity checks pass and no row is held after each); a client that
disconnects, mid-stream or while waiting for a whole answer, has its request cancelled and its rows freed; more
requests than the pool's budget admits wait and all complete; a full queue answers 429; seeded sampling repeats;
stop strings cut the text; SIGTERM with a stream open stops the server cleanly and leaves no process.

The server: budget 128 blocks of 16 tokens (2048 tokens of K/V per layer), no prefix cache (so "no row held" means
every block is free), at most 4 running and 4 waiting. Prompts are ASCII text: one token per byte.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.workloads.limits import MAX_REQUEST_TOKENS
from probes.events import RequestArrived, RequestDone, Step
from probes.replay import Session

from .server_proc import post_raw, serve, wait_recorded, wait_state

pytestmark = pytest.mark.slow
MODEL = "synthetic:tiny-llama"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    record = tmp_path_factory.mktemp("serve-tiny")
    proc = serve("--model", MODEL, "--backend", "slab", "--budget", "128", "--block-size", "16",
                 "--no-prefix-cache", "--max-running", "4", "--max-waiting", "4", "--record", str(record),
                 "--metrics-port", "0")
    proc.record_dir = record
    yield proc
    proc.stop()


def session_of(server) -> Session:
    return Session.open(sorted(Path(server.record_dir).glob("*.slabrec"))[-1])


def assert_clean(server) -> dict:
    """No request, no sequence, no live block; the integrity checks pass."""
    state = wait_state(server, lambda s: not s["running"] and not s["waiting"])
    assert state["integrity"] == "ok", state
    assert state["live_sequences"] == [] and state["pool"]["num_sequences"] == 0 and \
        state["pool"]["live_blocks"] == 0, state
    return state


def body(**fields) -> bytes:
    return json.dumps({"model": MODEL, **fields}).encode()


HI = [{"role": "user", "content": "hi"}]
BAD = [
    ("chat", b"{not json", 400, "not valid JSON"),
    ("chat", b"[1, 2]", 400, "must be a JSON object"),
    ("chat", body(model="gpt-9", messages=HI), 404, "does not exist"),
    ("chat", body(), 400, "'messages' must be a non-empty list"),
    ("chat", body(messages=[{"role": "wizard", "content": "hi"}]), 400, "needs a 'role'"),
    ("chat", body(messages=[{"role": "user", "content": [{"type": "image_url"}]}]), 400, "text parts"),
    ("chat", body(messages=HI, n=2), 400, "'n' must be 1"),
    ("chat", body(messages=HI, temperature=3), 400, "'temperature' must be a number in [0, 2]"),
    ("chat", body(messages=HI, top_p=0), 400, "'top_p' must be above 0"),
    ("chat", body(messages=HI, stop=["a", "b", "c", "d", "e"]), 400, "'stop' must be"),
    ("chat", body(messages=HI, max_tokens=0), 400, "'max_tokens' must be an integer >= 1"),
    ("chat", body(messages=HI, max_tokens="ten"), 400, "'max_tokens' must be an integer >= 1"),
    ("chat", body(messages=HI, max_tokens=MAX_REQUEST_TOKENS + 1), 400, "exceeds the limit"),
    ("chat", body(messages=HI, logprobs=True), 400, "'logprobs' is not supported"),
    ("chat", body(messages=HI, stream_options={"include_usage": True}), 400, "only with 'stream': true"),
    ("completion", body(prompt=""), 400, "'prompt' must be"),
    ("completion", body(prompt=[5, 10**9]), 400, "outside the vocabulary"),
    ("completion", body(prompt="x" * 5000, max_tokens=4), 400, "maximum context length is 4,096"),
    ("completion", body(prompt="x" * 100, max_tokens=4000), 400, "maximum context length is 4,096"),
    ("completion", body(prompt="x" * 100, max_tokens=2000), 400, "the pool's budget is 128"),
]


@pytest.mark.parametrize("kind,payload,status,words", BAD, ids=[w for *_, w in BAD])
def test_bad_input_gets_an_openai_error_and_changes_nothing(server, kind, payload, status, words):
    before = assert_clean(server)
    code, answer = post_raw(server.url + ("/v1/chat/completions" if kind == "chat" else "/v1/completions"), payload)
    assert code == status, answer
    assert words in answer["error"]["message"] and answer["error"]["type"] == "invalid_request_error", answer
    after = assert_clean(server)
    assert after["pool"] == before["pool"] and after["requests_finished"] == before["requests_finished"]


def open_request(server, *, max_tokens: int, stream: bool, prompt: str = "once upon a time " * 2):
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    payload = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": stream}
    conn.request("POST", "/v1/completions", json.dumps(payload), {"Content-Type": "application/json"})
    return conn


def hang_up(conn) -> None:
    """The client goes away: both directions of its socket shut (a response object still holds the socket open
    otherwise), then closed."""
    if conn.sock is not None:
        conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()


def read_events(conn, count: int):
    response = conn.getresponse()
    assert response.status == 200
    seen = 0
    while seen < count:
        seen += response.fp.readline().startswith(b"data: ")
    return response


def finished_since(server, count: int) -> list:
    """The RequestDone events recorded after the first ``count``, once there is one more."""
    session = wait_recorded(server.record_dir, lambda s: len(s.events_of(RequestDone)) > count)
    return session.events_of(RequestDone)[count:]


def test_a_client_that_disconnects_mid_stream_frees_its_rows(server):
    known = len(session_of(server).events_of(RequestDone))
    conn = open_request(server, max_tokens=2000, stream=True)
    read_events(conn, 4)  # it is decoding
    hang_up(conn)
    assert_clean(server)
    done = finished_since(server, known)
    assert [e.finish_reason for e in done] == ["disconnected"] and done[0].generated_tokens < 2000


def test_a_client_that_disconnects_while_waiting_for_a_whole_answer_is_cancelled(server):
    known = len(session_of(server).events_of(RequestDone))
    conn = open_request(server, max_tokens=2000, stream=False)
    wait_state(server, lambda s: s["running"])
    hang_up(conn)
    assert_clean(server)
    done = finished_since(server, known)
    assert [e.finish_reason for e in done] == ["disconnected"] and done[0].generated_tokens < 2000


def complete(server, prompt: str, max_tokens: int, **fields) -> dict:
    code, answer = post_raw(server.url + "/v1/completions", body(prompt=prompt, max_tokens=max_tokens, **fields))
    assert code == 200, answer
    return answer


def test_more_requests_than_the_budget_admits_wait_and_all_complete(server):
    known = len(session_of(server).events_of(RequestDone))
    steps_before = len(session_of(server).events_of(Step))
    prompts = [f"request {i} " + "y" * 900 for i in range(4)]  # 910 tokens + 20: 59 blocks; 2 fit in 128
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda p: complete(server, p, 20, ignore_eos=True), prompts))
    assert [a["usage"]["completion_tokens"] for a in answers] == [20] * 4
    session = wait_recorded(server.record_dir, lambda s: len(s.events_of(RequestDone)) >= known + 4)
    decode = [s.batch for s in session.events_of(Step)[steps_before:] if s.type == "decode"]
    assert max(decode) == 2  # never more than the budget holds
    assert_clean(server)


def test_a_full_queue_answers_429_and_the_queued_requests_are_freed(server):
    running = open_request(server, max_tokens=2010, stream=True, prompt="x" * 30)  # 2040 tokens: all 128 blocks
    read_events(running, 2)
    queued = [open_request(server, max_tokens=8, stream=True) for _ in range(4)]
    state = wait_state(server, lambda s: len(s["waiting"]) == 4)
    assert len(state["running"]) == 1
    code, answer = post_raw(server.url + "/v1/completions", body(prompt="one more", max_tokens=4))
    assert code == 429 and answer["error"]["type"] == "rate_limit_error" and "4 requests waiting" in \
        answer["error"]["message"]
    for conn in [running, *queued]:
        hang_up(conn)
    assert_clean(server)


def test_seeded_sampling_repeats_and_greedy_is_the_default_here(server):
    prompt = "the lighthouse keeper "
    first = complete(server, prompt, 24, temperature=1.2, seed=11, ignore_eos=True)["choices"][0]["text"]
    again = complete(server, prompt, 24, temperature=1.2, seed=11, ignore_eos=True)["choices"][0]["text"]
    other = complete(server, prompt, 24, temperature=1.2, seed=12, ignore_eos=True)["choices"][0]["text"]
    greedy = complete(server, prompt, 24, ignore_eos=True)["choices"][0]["text"]  # --temperature 0 default
    assert first == again and first != other and first != greedy
    assert complete(server, prompt, 24, temperature=0, ignore_eos=True)["choices"][0]["text"] == greedy
    assert_clean(server)


def test_a_stop_string_cuts_the_text_and_ends_the_request(server):
    prompt = "the harbour at dawn "
    full = complete(server, prompt, 40, ignore_eos=True)["choices"][0]["text"]
    stop = full[len(full) // 2:len(full) // 2 + 3]
    cut = complete(server, prompt, 40, ignore_eos=True, stop=[stop])
    assert cut["choices"][0]["text"] == full[:full.index(stop)] and cut["choices"][0]["finish_reason"] == "stop"
    assert cut["usage"]["completion_tokens"] < 40
    conn = open_request(server, max_tokens=40, stream=True, prompt=prompt)
    conn.close()
    code, streamed = 0, ""
    host, port = server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/v1/completions", body(prompt=prompt, max_tokens=40, ignore_eos=True, stop=[stop],
                                                  stream=True), {"Content-Type": "application/json"})
    response = conn.getresponse()
    reasons = []
    for line in response.read().decode().splitlines():
        if line.startswith("data: {"):
            choice = json.loads(line[6:])["choices"][0]
            streamed += choice["text"]
            reasons.append(choice["finish_reason"])
    assert streamed == cut["choices"][0]["text"] and reasons[-1] == "stop"
    assert_clean(server)
    wait_recorded(server.record_dir, lambda s: "stop" in {e.finish_reason for e in s.events_of(RequestDone)})


def test_the_metrics_endpoint_serves_the_probes_and_the_request_counts(server):
    complete(server, "count me", 4)
    url = next(line.split("metrics: ", 1)[1] for line in server.output if line.startswith("metrics: http"))
    decoded = 'slabscope_tokens_total{backend="slab",type="decode"}'
    deadline = time.monotonic() + 30
    while True:  # the probes' events reach the front every 75 ms: scrape until the request's steps are in
        values = {}
        for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
            if line.startswith("slabscope_") and " " in line:
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        if values.get(decoded, 0) >= 4 or time.monotonic() > deadline:
            break
    assert values['slabscope_serve_requests_running{backend="slab"}'] == 0
    assert values['slabscope_serve_requests_waiting{backend="slab"}'] == 0
    assert values['slabscope_serve_requests_finished_total{backend="slab",reason="length"}'] >= 1
    assert values['slabscope_footprint_bytes{backend="slab"}'] > 0
    assert values['slabscope_tokens_total{backend="slab",type="decode"}'] >= 4


def test_the_front_never_imports_mlx_and_the_engine_runs_on_openblas(server):
    """The HTTP front holds no MLX (nor a device context); the engine worker loaded OpenBLAS before mlx (an import of
    mlx first leaves MLX on its reference BLAS, ~30x slower matmuls on a CPU: app/models/blas.py)."""
    from app.models.blas import OPENBLAS_PATH

    state = server.state()
    assert state["front"]["mlx_imported"] is False and state["front"]["pid"] == server.pid
    blas = session_of(server).meta["blas"]
    if os.path.exists(OPENBLAS_PATH):
        assert "OpenBLAS" in blas and "reference" not in blas, blas


def test_sigterm_with_a_stream_open_stops_cleanly_and_leaves_no_process(server):
    conn = open_request(server, max_tokens=2000, stream=True)
    read_events(conn, 2)
    assert server.stop() == 0  # asserts that no process of the server is left
    session = session_of(server)
    assert session.summary is not None and session.summary.summary["serve"]["stopped_by"] == "shutdown"
    assert session.events_of(RequestDone)[-1].finish_reason in ("disconnected", "shutdown")
    assert len(session.events_of(RequestArrived)) == len(session.events_of(RequestDone))
