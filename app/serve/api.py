"""OpenAI's HTTP API as ``slabscope serve`` speaks it: request bodies checked into typed jobs, responses and errors
built as OpenAI's clients expect them (mlx-free, no I/O).

``parse_request(kind, body, served_model)`` turns a decoded JSON body of ``/v1/chat/completions`` (kind "chat") or
``/v1/completions`` (kind "completion") into a ``Job`` or raises ``ApiError`` (an HTTP status, an OpenAI error type,
a one-line message naming the field). Supported: ``model``, ``messages`` (text content, or text parts) / ``prompt``
(a string, one string in a list, or token ids), ``max_tokens`` / ``max_completion_tokens``, ``temperature``,
``top_p``, ``seed``, ``stop`` (up to ``MAX_STOP`` strings), ``stream`` and ``stream_options.include_usage``, ``n``
(1 only), and vLLM's ``ignore_eos``. Fields that would change the output and are not implemented (``logprobs``,
penalties, ``logit_bias``, tools) are refused when set to anything but their neutral value, never ignored;
other fields (``user``, ``metadata``, ...) are accepted and ignored, as OpenAI's clients send them freely.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field

from app.workloads.limits import MAX_REQUEST_TOKENS

MAX_STOP = 4                 # OpenAI's bound on stop sequences
MAX_STOP_CHARS = 256         # one stop sequence's length
MAX_MESSAGES = 4096          # turns in one chat request
ROLES = ("system", "developer", "user", "assistant", "tool")
NEUTRAL = {"logprobs": (None, False), "top_logprobs": (None, 0), "frequency_penalty": (None, 0, 0.0),
           "presence_penalty": (None, 0, 0.0), "logit_bias": (None, {}), "tools": (None, []),
           "tool_choice": (None, "none", "auto"), "functions": (None, []), "response_format": (None,),
           "echo": (None, False), "best_of": (None, 1), "suffix": (None, "")}


class ApiError(Exception):
    """An OpenAI-style error: ``status`` (HTTP), ``type``, ``message``, ``param``, ``code``."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass(frozen=True)
class Job:
    """One checked request."""

    kind: str                                   # "chat" | "completion"
    model: str
    messages: list[dict] | None = None          # chat: [{"role", "content"}] with text content
    prompt: str | list[int] | None = None       # completion
    max_tokens: int | None = None               # None: the server's default, capped by the model's positions
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    ignore_eos: bool = False


def parse_request(kind: str, body, served_model: str, aliases: tuple[str, ...] = (), *,
                  default_temperature: float = 1.0) -> Job:
    """The ``Job`` a request body asks for (see the module docstring); ``ApiError`` for anything else. A request
    without ``temperature`` gets ``default_temperature`` (OpenAI's default is 1; ``slabscope serve --temperature``)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' is required (a string: GET /v1/models lists it)", param="model")
    if model != served_model and model not in aliases:
        raise ApiError(404, f"The model '{model}' does not exist; this server serves '{served_model}'",
                       param="model", code="model_not_found")
    for name, neutral in NEUTRAL.items():
        if name in body and body[name] not in neutral:
            raise ApiError(400, f"'{name}' is not supported by slabscope serve", param=name)
    n = body.get("n", 1)
    if n not in (None, 1):
        raise ApiError(400, "'n' must be 1 (one choice per request)", param="n")
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or not stream):
        raise ApiError(400, "'stream_options' must be an object, and only with 'stream': true",
                       param="stream_options")
    include_usage = _bool(options or {}, "include_usage", False)
    temperature = _number(body, "temperature", default_temperature, 0.0, 2.0)
    common = dict(model=model, max_tokens=_max_tokens(body), temperature=temperature, top_p=_top_p(body),
                  seed=_seed(body), stop=_stop(body), stream=stream, include_usage=include_usage,
                  ignore_eos=_bool(body, "ignore_eos", False))
    if kind == "chat":
        return Job(kind, messages=_messages(body.get("messages")), **common)
    return Job(kind, prompt=_prompt(body.get("prompt")), **common)


def _bool(body: dict, name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"'{name}' must be true or false, got {value!r}", param=name)
    return value


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ApiError(400, f"'{name}' must be a number in [{low:g}, {high:g}], got {value!r}", param=name)
    return float(value)


def _top_p(body: dict) -> float:
    value = _number(body, "top_p", 1.0, 0.0, 1.0)
    if value == 0.0:
        raise ApiError(400, "'top_p' must be above 0 (1 keeps every token)", param="top_p")
    return value


def _seed(body: dict) -> int | None:
    value = body.get("seed")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**64:
        raise ApiError(400, f"'seed' must be a 64-bit integer, got {value!r}", param="seed")
    return value


def _max_tokens(body: dict) -> int | None:
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ApiError(400, f"'{name}' must be an integer >= 1, got {value!r}", param=name)
    if value > MAX_REQUEST_TOKENS:
        raise ApiError(400, f"'{name}' {value:,} exceeds the limit {MAX_REQUEST_TOKENS:,} (app/workloads/limits.py)",
                       param=name)
    return value


def _stop(body: dict) -> list[str]:
    value = body.get("stop")
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOP \
            or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise ApiError(400, f"'stop' must be a non-empty string or a list of up to {MAX_STOP} of them, each up to "
                            f"{MAX_STOP_CHARS} characters", param="stop")
    return list(stops)


def _text(content, where: str) -> str:
    """A message's content: a string, or a list of {"type": "text", "text": ...} parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise ApiError(400, f"{where}.content must be a string or a list of text parts (other content types are not "
                        "supported)", param="messages")


def _messages(value) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "'messages' must be a non-empty list of {role, content} objects", param="messages")
    if len(value) > MAX_MESSAGES:
        raise ApiError(400, f"'messages' has {len(value):,} turns, over the limit {MAX_MESSAGES:,}", param="messages")
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise ApiError(400, f"{where} needs a 'role' in {', '.join(ROLES)}", param="messages")
        role = "system" if message["role"] == "developer" else message["role"]
        out.append({"role": role, "content": _text(message.get("content"), where)})
    return out


def _prompt(value) -> str | list[int]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # one prompt in a batch of one
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return list(value)
    raise ApiError(400, "'prompt' must be a non-empty string or a non-empty list of token ids (one prompt per "
                        "request)", param="prompt")


# ---- responses ------------------------------------------------------------------------------------------------
def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_body(job: Job, rid: str, text: str, finish: str, prompt_tokens: int, completion_tokens: int) -> dict:
    """The whole answer of a request that did not stream."""
    if job.kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish,
                  "logprobs": None}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": int(time.time()), "model": job.model, "choices": [choice],
            "usage": usage(prompt_tokens, completion_tokens)}


def chunk_body(job: Job, rid: str, text: str | None, finish: str | None, first: bool = False) -> dict:
    """One server-sent event of a streamed answer (``text`` None: no content in it, e.g. the last one)."""
    if job.kind == "chat":
        delta: dict = {"role": "assistant"} if first else {}
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": int(time.time()), "model": job.model, "choices": [choice]}


def usage_chunk(job: Job, rid: str, prompt_tokens: int, completion_tokens: int) -> dict:
    """The last event of a stream that asked for usage (``stream_options.include_usage``): no choices."""
    obj = "chat.completion.chunk" if job.kind == "chat" else "text_completion"
    return {"id": rid, "object": obj, "created": int(time.time()), "model": job.model, "choices": [],
            "usage": usage(prompt_tokens, completion_tokens)}


def models_body(model: str, created: int) -> dict:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created,
                                         "owned_by": "slabscope"}]}
