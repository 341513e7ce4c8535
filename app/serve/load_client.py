"""The HTTP side of ``slabscope load``: planned requests sent to an OpenAI-compatible server, each one timed.

Each request is streamed (``stream: true`` with ``stream_options.include_usage``) so the time of its first token is
seen: ``RequestResult`` holds when it was sent, when the first chunk carrying text arrived (time to first token),
when it ended, the arrival time of every text chunk, and the server's ``usage`` (prompt and completion tokens; the
text chunks counted when a server sends no usage). Phases run in order: a requests phase keeps its ``concurrency``
requests in flight (a new one is sent as one finishes, optionally no faster than ``rate`` per second, Poisson),
an idle phase waits, a conversation sends its turns one after the other, each with the conversation so far.

Nothing a server does stops ``load``: a refused connection, a connection reset mid-answer (a server killed by the
out-of-memory killer), an HTTP error, a malformed event and a timeout each end that request with an error class
and a one-line message, and the run goes on (bounded: every request ends within ``timeout_s``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import aiohttp

from app.serve.load_plan import PlannedPhase, PlannedRequest

ERROR_CLASSES = ("refused", "reset", "http_4xx", "http_5xx", "timeout", "stream_error")


@dataclass
class RequestResult:
    """What one request did (times in seconds on the load process's monotonic clock)."""

    index: int
    phase: str
    sent: float
    first: float | None = None
    end: float | None = None
    chunks: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None        # one of ERROR_CLASSES
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and self.end is not None

    @property
    def output_tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else len(self.chunks)


@dataclass(frozen=True)
class Target:
    """Where and how to send: the server's base URL (``http://127.0.0.1:8080``), the model name, the endpoint
    ("completions" or "chat"), and request fields every request carries."""

    url: str
    model: str
    endpoint: str = "completions"
    temperature: float = 0.0
    ignore_eos: bool = True
    timeout_s: float = 600.0

    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"

    def body(self, prompt: str, max_tokens: int) -> dict:
        body = {"model": self.model, "max_tokens": max_tokens, "temperature": self.temperature, "stream": True,
                "stream_options": {"include_usage": True}}
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body


async def send(session: aiohttp.ClientSession, target: Target, request: PlannedRequest,
               prompt: str | None = None) -> RequestResult:
    """Send one request and time it; never raises for what the server does (see the module docstring)."""
    result = RequestResult(request.index, request.phase, time.monotonic())
    try:
        async with asyncio.timeout(target.timeout_s):
            async with session.post(target.url + target.path(),
                                    json=target.body(prompt or request.prompt, request.max_tokens)) as response:
                if response.status >= 400:
                    return _http_error(result, response.status, await response.text())
                await _read_events(response, result)
    except TimeoutError:
        _fail(result, "timeout", f"no answer within {target.timeout_s:g} s")
    except aiohttp.ClientConnectorError as exc:
        _fail(result, "refused", f"cannot connect: {exc.os_error or exc}")
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionResetError,
            aiohttp.ClientOSError) as exc:
        _fail(result, "reset", f"connection lost mid-answer: {type(exc).__name__}: {exc}")
    except aiohttp.ClientError as exc:
        _fail(result, "stream_error", f"{type(exc).__name__}: {exc}")
    if result.error is None and result.end is None:
        _fail(result, "stream_error", "the stream ended without [DONE]")
    return result


async def _read_events(response: aiohttp.ClientResponse, result: RequestResult) -> None:
    """Read server-sent events (``data: {...}`` lines; comments and blank lines skipped) until ``[DONE]``."""
    async for raw in response.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        now = time.monotonic()
        if data == b"[DONE]":
            result.end = now
            return
        try:
            event = json.loads(data)
        except ValueError:
            _fail(result, "stream_error", f"an event that is not JSON: {data[:80]!r}")
            return
        if not isinstance(event, dict) or "error" in event:
            error = event.get("error") if isinstance(event, dict) else event
            _fail(result, "stream_error", f"the server ended the stream with an error: {str(error)[:200]}")
            return
        _take_event(event, result, now)


def _take_event(event: dict, result: RequestResult, now: float) -> None:
    usage = event.get("usage")
    if isinstance(usage, dict):
        result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
        result.completion_tokens = usage.get("completion_tokens", result.completion_tokens)
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        text = choice.get("text") if "text" in choice else delta.get("content")
        if text:
            result.text += text
            result.chunks.append(now)
            if result.first is None:
                result.first = now
        if choice.get("finish_reason"):
            result.finish_reason = choice["finish_reason"]


def _http_error(result: RequestResult, status: int, body: str) -> RequestResult:
    try:
        message = json.loads(body)["error"]
        message = message.get("message", message) if isinstance(message, dict) else message
    except (ValueError, KeyError, TypeError):
        message = body
    _fail(result, "http_5xx" if status >= 500 else "http_4xx", f"HTTP {status}: {str(message)[:200]}")
    return result


def _fail(result: RequestResult, kind: str, message: str) -> None:
    result.error, result.message = kind, message
    result.end = None


async def run_phases(target: Target, phases: list[PlannedPhase], *, rate: float | None = None,
                     seed: int = 0, on_result=None) -> list[RequestResult]:
    """Every phase in order (see the module docstring); the results in the order requests ended."""
    results: list[RequestResult] = []
    rng = random.Random(seed)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for phase in phases:
            if phase.kind == "idle":
                await asyncio.sleep(phase.idle_s)
            elif phase.kind == "conversation":
                await _conversation(session, target, phase, results, on_result)
            else:
                await _requests(session, target, phase, results, on_result, rate, rng)
    return results


def arrival_times(count: int, rate: float | None, rng: random.Random) -> list[float]:
    """When each of ``count`` requests may be sent, in seconds from the phase's start: a Poisson process of
    ``rate`` per second (exponential gaps drawn from ``rng``; the first at 0), or all at once without a rate."""
    times, t = [], 0.0
    for _ in range(count):
        times.append(t)
        t += rng.expovariate(rate) if rate else 0.0
    return times


async def _requests(session, target: Target, phase: PlannedPhase, results: list, on_result, rate, rng) -> None:
    """``phase.concurrency`` workers take the phase's requests in order; with ``rate``, a request is not sent
    before its Poisson arrival time."""
    pending = list(phase.requests)
    start = time.monotonic()
    arrivals = arrival_times(len(pending), rate, rng)
    lock = asyncio.Lock()

    async def worker() -> None:
        while True:
            async with lock:
                if not pending:
                    return
                request, at = pending.pop(0), arrivals.pop(0)
            delay = start + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            result = await send(session, target, request)
            results.append(result)
            if on_result is not None:
                on_result(result)

    await asyncio.gather(*(worker() for _ in range(min(phase.concurrency, len(phase.requests)) or 1)))


async def _conversation(session, target: Target, phase: PlannedPhase, results: list, on_result) -> None:
    history = ""
    for request in phase.requests:
        prompt = history + request.prompt
        result = await send(session, target, request, prompt)
        results.append(result)
        if on_result is not None:
            on_result(result)
        history = prompt + result.text
