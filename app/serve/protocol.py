"""The messages between the HTTP front and the engine worker (mlx-free, typed, msgpack on the wire).

Front -> engine: ``Submit`` (a request: chat messages or a prompt, its limits and sampling), ``Cancel`` (a client
went away, a stop string matched, the server stops), ``Inspect`` (the engine's state, for ``/slabscope/state``),
``Shutdown``. Engine -> front: ``Ready`` (the model, its limits, the pickled decoder the front detokenizes with),
``Accepted``/``Rejected`` (the answer to a ``Submit``, before any token), ``Tokens`` (one per engine step: the new
token ids of every request that got one, finished requests with their reason, the running and waiting counts),
``State`` (the answer to ``Inspect``) and ``Fatal`` (the engine failed). Every message is a frozen msgspec Struct
tagged by type; ``encode``/``decode`` are the only conversion, so a malformed message fails in one place.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec


class Message(msgspec.Struct, frozen=True, tag=True, tag_field="msg", kw_only=True):
    """Base of every message (tagged by class name)."""


class SamplingSpec(msgspec.Struct, frozen=True):
    """OpenAI's sampling fields, checked by the front: temperature in [0, 2], top_p in (0, 1], a seed (the front
    draws one when the client gave none)."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0


class Submit(Message, frozen=True):
    """One request. ``messages`` (chat, through the model's chat template) or ``prompt`` (text, or token ids);
    ``max_tokens`` None: as many as the model's positions leave, up to the server's default."""

    rid: int
    messages: list[dict[str, str]] | None = None
    prompt: str | list[int] | None = None
    max_tokens: int | None = None
    sampling: SamplingSpec = SamplingSpec()
    ignore_eos: bool = False


class Cancel(Message, frozen=True):
    """End request ``rid`` now; ``reason`` is what its RequestDone event records ("disconnected", "stop", ...)."""

    rid: int
    reason: str = "cancelled"


class Inspect(Message, frozen=True):
    qid: int
    check: bool = True  # run the pool's and the scheduler's integrity checks


class Shutdown(Message, frozen=True):
    pass


class Ready(Message, frozen=True):
    """The engine is up. ``info``: model name, backend, positions, eos ids, pid, recording path...; ``decoder``:
    the pickled tokenizer the front decodes generated tokens with."""

    info: dict[str, Any]
    decoder: bytes


class Accepted(Message, frozen=True):
    """Request ``rid`` is queued: its prompt's length, its max_tokens, and the queue and batch after it joined."""

    rid: int
    prompt_tokens: int
    max_tokens: int
    running: int = 0
    waiting: int = 0


class Rejected(Message, frozen=True):
    """An OpenAI-style error for request ``rid``: HTTP ``status``, error ``type``, one-line ``message``."""

    rid: int
    status: int
    type: str
    message: str
    param: str | None = None
    code: str | None = None


class Progress(msgspec.Struct, frozen=True, array_like=True):
    """New token ids of one request; ``finish`` its finish reason when this is its last update."""

    rid: int
    ids: list[int]
    finish: str | None = None


class Tokens(Message, frozen=True):
    """What one engine step produced, and the load after it."""

    items: list[Progress]
    running: int
    waiting: int


class State(Message, frozen=True):
    qid: int
    state: dict[str, Any]


class Fatal(Message, frozen=True):
    text: str
    traceback: str = ""


ToEngine = Union[Submit, Cancel, Inspect, Shutdown]
ToFront = Union[Ready, Accepted, Rejected, Tokens, State, Fatal]
_ENCODER = msgspec.msgpack.Encoder()
_TO_ENGINE = msgspec.msgpack.Decoder(ToEngine)
_TO_FRONT = msgspec.msgpack.Decoder(ToFront)


def encode(message: Message) -> bytes:
    return _ENCODER.encode(message)


def decode_for_engine(data: bytes) -> ToEngine:
    return _TO_ENGINE.decode(data)


def decode_for_front(data: bytes) -> ToFront:
    return _TO_FRONT.decode(data)

