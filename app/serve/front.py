"""The HTTP front of ``slabscope serve`` (aiohttp, no mlx): OpenAI's endpoints over the engine worker.

Routes: ``POST /v1/chat/completions`` and ``/v1/completions`` (also without ``/v1``), whole or streamed as
server-sent events ending in ``data: [DONE]``; ``GET /v1/models``; ``GET /health`` (200 once the model is loaded,
503 while loading or once the engine is gone, with why); ``GET /slabscope/state`` (the engine's requests, pool
stats and integrity check: what the tests and an operator look at).

A request's way: the body is checked (``app.serve.api``; a bad one is a 4xx before the engine hears of it), a
``Submit`` goes to the engine, which tokenizes and checks it against the model and the pool (``Accepted`` or a
4xx ``Rejected``), then its tokens arrive step by step and become text here (``app.serve.text``). A client that
goes away (a failed write, or aiohttp cancelling the handler of a closed connection) and a stop string both cancel
the request in the engine, which frees its K/V at once.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from aiohttp import web

from app.serve import api
from app.serve import protocol as proto
from app.serve.engine_client import EngineDead, EngineProcess
from app.serve.text import TextStream

MAX_BODY_BYTES = 64 * 1024 * 1024  # a 1M-token prompt as text is ~4 MB; token ids as JSON ~8 MB
SHUTDOWN_S = 2.0                   # open connections' grace at stop (their requests are already cancelled)


class Front:
    """Owns the aiohttp application's handlers; reads the engine's state (``EngineProcess``)."""

    def __init__(self, engine: EngineProcess, *, default_temperature: float = 1.0) -> None:
        self.engine = engine
        self.default_temperature = default_temperature
        self.created = int(time.time())
        self.model_name = ""
        self.aliases: tuple[str, ...] = ()  # other names a request may give the model ("default", the folder name)
        self.finished: dict[str, int] = {}  # finish reason -> requests
        self.on_finish = None  # called with each finished request's reason (the metrics)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_json_errors])
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/chat/completions", self.chat)
            app.router.add_post(f"{prefix}/completions", self.completion)
            app.router.add_get(f"{prefix}/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/slabscope/state", self.state)
        return app

    def shutdown(self) -> None:
        """The server stops: every open request is cancelled in the engine ("shutdown") and its client told so (a
        503, or an error event ending its stream), so no handler waits for its answer to finish."""
        engine = self.engine
        for rid, stream in list(engine.streams.items()):
            engine.cancel(rid, "shutdown")
            stream.updates.put_nowait(EngineDead("the server is shutting down"))
            if not stream.accepted.done():
                stream.accepted.set_exception(EngineDead("the server is shutting down"))
                stream.accepted.exception()

    # ---- plain endpoints ---------------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        engine = self.engine
        if engine.dead is not None:
            return web.json_response({"status": "error", "reason": engine.dead}, status=503)
        if not engine.info:
            return web.json_response({"status": "loading"}, status=503)
        return web.json_response({"status": "ok", "model": engine.info["model"], "backend": engine.info["backend"],
                                  "running": engine.running, "waiting": engine.waiting})

    async def models(self, request: web.Request) -> web.Response:
        if not self.model_name:
            return _error(503, "the model is still loading", "server_error")
        return web.json_response(api.models_body(self.model_name, self.created))

    async def state(self, request: web.Request) -> web.Response:
        try:
            state = await self.engine.inspect(check=request.query.get("check", "1") != "0")
        except EngineDead as exc:
            return _error(503, str(exc), "server_error", code="engine_unavailable")
        state["front"] = {"open_streams": len(self.engine.streams), "finished": dict(self.finished),
                          "pid": os.getpid(), "mlx_imported": "mlx.core" in sys.modules}
        return web.json_response(state)

    # ---- completions -------------------------------------------------------------------------------------------
    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "chat")

    async def completion(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, "completion")

    async def _complete(self, request: web.Request, kind: str) -> web.StreamResponse:
        try:
            job = api.parse_request(kind, await _json_body(request), self.model_name, self.aliases,
                                    default_temperature=self.default_temperature)
        except api.ApiError as exc:
            return web.json_response(exc.body(), status=exc.status)
        if not self.model_name:
            return _error(503, "the model is still loading", "server_error")
        try:
            stream = self.engine.submit(lambda rid: _submit(rid, job))
        except EngineDead as exc:
            return _error(503, str(exc), "server_error", code="engine_unavailable")
        done = False
        try:
            answer = await stream.accepted
            if isinstance(answer, proto.Rejected):
                done = True
                return _error(answer.status, answer.message, answer.type, answer.param, answer.code)
            text = TextStream(self.engine.decoder, job.stop, self.engine.info.get("eos_token_ids", ()))
            if job.stream:
                response, reason = await self._stream(request, job, stream, answer, text)
            else:
                response, reason = await self._whole(job, stream, answer, text)
            done = reason is not None
            if reason is not None:
                self.finished[reason] = self.finished.get(reason, 0) + 1
                if self.on_finish is not None:
                    self.on_finish(reason)
            return response
        except EngineDead as exc:
            done = True
            return _error(503, str(exc), "server_error", code="engine_unavailable")
        finally:
            if done:
                self.engine.release(stream.rid)
            else:  # the client went away (a failed write, or the handler cancelled): free its K/V now
                self.engine.cancel(stream.rid, "disconnected")

    async def _updates(self, stream, text: TextStream):
        """The request's progress as (new text, finish reason or None) until it ends; a stop string ends it here
        (and in the engine). Raises EngineDead; a late rejection is an ApiError."""
        while True:
            item = await stream.updates.get()
            if isinstance(item, EngineDead):
                raise item
            if isinstance(item, proto.Rejected):
                raise api.ApiError(item.status, item.message, type=item.type, param=item.param)
            text.add(item.ids, last=item.finish is not None)
            if text.stopped:
                self.engine.cancel(stream.rid, "stop")
                yield text.finish(), "stop"
                return
            if item.finish is not None:
                yield text.finish(), item.finish
                return
            yield text.take(), None

    async def _whole(self, job, stream, answer, text: TextStream):
        reason = "length"
        try:
            async for _, finish in self._updates(stream, text):
                reason = finish or reason
        except api.ApiError as exc:
            return web.json_response(exc.body(), status=exc.status), "rejected"
        body = api.completion_body(job, api.new_id(job.kind), text.text, reason, answer.prompt_tokens,
                                   text.tokens_used)
        return web.json_response(body), reason

    async def _stream(self, request, job, stream, answer, text: TextStream):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        rid = api.new_id(job.kind)
        if job.kind == "chat":
            await _event(response, api.chunk_body(job, rid, "", None, first=True))  # the role, as OpenAI does
        reason = None
        try:
            async for delta, finish in self._updates(stream, text):
                if delta:
                    await _event(response, api.chunk_body(job, rid, delta, None))
                reason = finish
        except (api.ApiError, EngineDead) as exc:
            error = exc if isinstance(exc, api.ApiError) else api.ApiError(503, str(exc), type="server_error")
            await _event(response, error.body())
            await response.write(b"data: [DONE]\n\n")
            return response, "error"
        await _event(response, api.chunk_body(job, rid, None, reason))
        if job.include_usage:
            await _event(response, api.usage_chunk(job, rid, answer.prompt_tokens, text.tokens_used))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response, reason


@web.middleware
async def _json_errors(request: web.Request, handler):
    """aiohttp's own errors (no such route, wrong method, a body over the size limit) as OpenAI-style JSON."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, f"{request.method} {request.path}: {exc.reason}", "invalid_request_error")


async def _json_body(request: web.Request):
    raw = await request.read()
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise api.ApiError(400, f"the request body is not valid JSON: {exc}") from None


async def _event(response: web.StreamResponse, body: dict) -> None:
    await response.write(b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n")


def _submit(rid: int, job: api.Job) -> proto.Submit:
    seed = job.seed if job.seed is not None else random.getrandbits(63)
    sampling = proto.SamplingSpec(temperature=job.temperature, top_p=job.top_p, seed=seed)
    return proto.Submit(rid=rid, messages=job.messages, prompt=job.prompt, max_tokens=job.max_tokens,
                        sampling=sampling, ignore_eos=job.ignore_eos)


def _error(status: int, message: str, type: str, param: str | None = None, code: str | None = None) -> web.Response:
    return web.json_response(api.error_body(message, type, param, code), status=status)


async def start_site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Listen on ``host:port`` (0: a free port); (runner, the port bound). OSError when it cannot listen. The
    handler of a request whose client disconnected is cancelled (that is how a waiting client's leaving is seen)."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=SHUTDOWN_S)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner, runner.addresses[0][1]
