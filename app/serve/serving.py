"""The engine side of ``slabscope serve``: requests in, token ids out, continuous batching on a workload session.

``ServingEngine`` owns one ``WorkloadSession`` (model, KV backend, scheduler, engine: ``app.workloads``) and the
requests it serves. The worker process calls ``submit``/``cancel``/``inspect`` with the front's messages between
engine steps and ``step`` while anything runs; each step's new tokens leave as one ``Tokens`` message. Prompts are
tokenized here, with the model's own tokenizer and chat template (what ``slabscope generate`` does), and checked
against the model's positions, ``app.workloads.limits`` and the pool's budget before they are queued, so a request
that can never run is a 4xx answer and never reaches the scheduler. The front turns tokens into text.

Events for the probes (``emit``, stamped by them): ``RequestArrived`` per accepted request, ``Step`` (phase
"serve") and the backend's step events per forward pass, ``RequestDone`` per finished request with its finish
reason; ``tick`` after each step and on idle points. Finished sequences are not kept (a server runs for days).
"""

from __future__ import annotations

import time
from typing import Callable

import msgspec

from app.serve.config import ServeLimits
from app.serve.protocol import Accepted, Cancel, Progress, Rejected, Submit, Tokens
from app.workloads.limits import MAX_REQUEST_TOKENS
from app.workloads.sampling import Sampling
from app.workloads.scenarios import Scenario
from app.workloads.scheduler import Request, Sequence
from app.workloads.shrink_points import timed_point
from probes.events import Event, RequestArrived, RequestDone, Step

SERVE_SCENARIO = Scenario("serve", "requests from HTTP clients (slabscope serve)", {}, {}, ())
PHASE = "serve"


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """Token ids of a conversation through the model's chat template with the assistant's turn opened (what
    ``slabscope generate`` and mlx-lm's server do); a model without a template (synthetic models) gets the turns
    as ``role: content`` lines and an ``assistant:`` cue."""
    if getattr(tokenizer, "has_chat_template", False):
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
    return list(tokenizer.encode(text))


class _Live:
    """A request the engine holds: its ``Request`` and how many of its tokens were reported."""

    __slots__ = ("request", "reported", "cancel_reason")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.reported = 0
        self.cancel_reason: str | None = None


class ServingEngine:
    """See the module docstring. Owns the session (``close`` releases it) and the live requests."""

    def __init__(self, session, limits: ServeLimits = ServeLimits(), *, emit: Callable[[Event], None] | None = None,
                 tick: Callable[[int, int], None] | None = None) -> None:
        self.session = session
        self.loaded = session.loaded
        self.limits = limits
        self.emit = emit or (lambda event: None)
        self.tick = tick or (lambda step, tokens: None)
        self.live: dict[int, _Live] = {}
        self.late_rejections: list[Rejected] = []
        self.steps = 0
        self.tokens = 0
        self.finished_total = 0
        session.scheduler.set_concurrency(limits.max_running)
        session.scheduler.reject_fn = self._rejected_late

    # ---- requests --------------------------------------------------------------------------------------------
    def submit(self, msg: Submit) -> Accepted | Rejected:
        """Tokenize and check ``msg``; queue it (``Accepted``) or say why not (``Rejected``: nothing changed)."""
        if msg.rid in self.live:
            return Rejected(rid=msg.rid, status=400, type="invalid_request_error", message="duplicate request id")
        try:
            ids = self._prompt_ids(msg)
        except ValueError as exc:
            return Rejected(rid=msg.rid, status=400, type="invalid_request_error", message=str(exc),
                            param="messages" if msg.messages is not None else "prompt")
        max_tokens = self._fit(len(ids), msg.max_tokens)
        if isinstance(max_tokens, Rejected):
            return msgspec.structs.replace(max_tokens, rid=msg.rid)
        scheduler = self.session.scheduler
        if len(scheduler.waiting) >= self.limits.max_waiting:
            return Rejected(rid=msg.rid, status=429, type="rate_limit_error",
                            message=f"the server has {len(scheduler.waiting)} requests waiting (--max-waiting "
                                    f"{self.limits.max_waiting}); retry later")
        request = Request(msg.rid, ids, max_tokens, PHASE, sampling=_sampling(msg),
                          stop_tokens=frozenset() if msg.ignore_eos else frozenset(self.loaded.eos_token_ids))
        scheduler.submit([request])
        self.live[msg.rid] = _Live(request)
        self.emit(RequestArrived(req_id=msg.rid, prompt_tokens=len(ids), max_tokens=max_tokens,
                                 waiting=len(scheduler.waiting), running=len(scheduler.running)))
        return Accepted(rid=msg.rid, prompt_tokens=len(ids), max_tokens=max_tokens, running=len(scheduler.running),
                        waiting=len(scheduler.waiting))

    def _prompt_ids(self, msg: Submit) -> list[int]:
        tokenizer = self.loaded.tokenizer
        try:
            if msg.messages is not None:
                ids = chat_ids(tokenizer, msg.messages)
            elif isinstance(msg.prompt, str):
                ids = list(tokenizer.encode(msg.prompt))
            else:
                ids = list(msg.prompt or [])
                bad = [i for i in ids if not 0 <= i < self.loaded.vocab_size]
                if bad:
                    raise ValueError(f"token id {bad[0]} is outside the vocabulary [0, {self.loaded.vocab_size})")
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template or tokenizer error is the request's fault
            raise ValueError(f"cannot tokenize the prompt: {type(exc).__name__}: {exc}") from None
        if not ids:
            raise ValueError("the prompt encodes to no tokens")
        return ids

    def _fit(self, prompt_tokens: int, max_tokens: int | None) -> int | Rejected:
        """The request's max_tokens (its default when None), or why the request can never run here."""
        positions = self.loaded.max_positions
        if max_tokens is None:
            max_tokens = self.limits.default_max_tokens
            if positions:
                max_tokens = min(max_tokens, positions - prompt_tokens)
        if prompt_tokens > MAX_REQUEST_TOKENS or max_tokens > MAX_REQUEST_TOKENS:
            return _invalid(f"{prompt_tokens:,} prompt tokens and max_tokens {max_tokens:,}: each is limited to "
                            f"{MAX_REQUEST_TOKENS:,} (app/workloads/limits.py)", "max_tokens")
        if (positions and prompt_tokens + max_tokens > positions) or max_tokens < 1:
            return _invalid(f"This model's maximum context length is {positions:,} tokens. However, you requested "
                            f"{prompt_tokens + max(max_tokens, 1):,} tokens ({prompt_tokens:,} in the prompt, "
                            f"{max(max_tokens, 1):,} for the completion).", "messages", code="context_length_exceeded")
        budget = self.session.spec.max_blocks_per_layer
        if self.session.pool is not None and budget is not None:
            block = self.session.pool_params["block_size"]
            needed = -(-(prompt_tokens + max_tokens) // block)
            if needed > budget:
                return _invalid(f"{prompt_tokens:,} prompt tokens + max_tokens {max_tokens:,} need {needed:,} blocks "
                                f"of {block} tokens per layer; the pool's budget is {budget:,} (--max-blocks)",
                                "max_tokens")
        return max_tokens

    def _rejected_late(self, request: Request) -> None:
        """A queued request the backend cannot take even alone (its check at submit could not foresee it)."""
        self.live.pop(request.req_id, None)
        self.late_rejections.append(Rejected(rid=request.req_id, status=400, type="invalid_request_error",
                                             message="the KV pool cannot hold this request even with nothing else "
                                                     "running"))

    def cancel(self, msg: Cancel) -> Tokens | None:
        """End request ``msg.rid`` (waiting or running; a finished or unknown one is ignored). A pipelined step that
        the cancel had to complete first is reported like any step (its Tokens message, else None)."""
        live = self.live.get(msg.rid)
        if live is None:
            return None
        live.cancel_reason = msg.reason
        drained = self.session.engine.cancel([msg.rid])
        if drained is not None:
            self._record_step(drained)
        items = self._progress(drained.finished if drained is not None else [])
        ended = self.live.pop(msg.rid, None)
        if ended is not None:  # it was waiting (never admitted), or running and now released
            self._finished(ended, None, msg.reason)
            items.append(Progress(msg.rid, [], msg.reason))
        return self._tokens(items)

    # ---- steps -----------------------------------------------------------------------------------------------
    def busy(self) -> bool:
        return not self.session.scheduler.idle()

    def step(self) -> Tokens | None:
        """One engine step; the tokens it produced (None when there was nothing to run)."""
        result = self.session.engine.step()
        if result is None:
            return None
        self._record_step(result)
        return self._tokens(self._progress(result.finished))

    def _record_step(self, result) -> None:
        self.steps += 1
        self.tokens += result.num_tokens
        self.emit(Step(phase=PHASE, type=result.kind, batch=result.batch, num_tokens=result.num_tokens,
                       wall_s=round(result.wall_s, 6)))
        for event in result.events:
            self.emit(event)
        self.tick(self.steps, self.tokens)

    def _progress(self, finished: list[Sequence]) -> list[Progress]:
        """New tokens of every request that got some, and the end of the ones that finished."""
        items = []
        for seq in [*self.session.scheduler.running, *finished]:
            live = self.live.get(seq.request.req_id)
            if live is None:
                continue
            new = seq.generated[live.reported:]
            live.reported = len(seq.generated)
            done = seq.finished
            if new or done:
                items.append(Progress(seq.request.req_id, new, seq.finish_reason if done else None))
            if done:
                del self.live[seq.request.req_id]
                self._finished(live, seq, seq.finish_reason)
        self.session.scheduler.finished.clear()  # a server keeps no finished sequences
        return items

    def _finished(self, live: _Live, seq: Sequence | None, reason: str | None) -> None:
        self.finished_total += 1
        reason = live.cancel_reason or reason
        request = live.request
        self.emit(RequestDone(req_id=request.req_id, seq_id=seq.seq_id if seq is not None else -1,
                              prompt_tokens=len(request.prompt),
                              generated_tokens=len(seq.generated) if seq is not None else live.reported,
                              shared_tokens=seq.num_shared if seq is not None else 0, finish_reason=reason))

    def _tokens(self, items: list[Progress]) -> Tokens:
        scheduler = self.session.scheduler
        return Tokens(items=items, running=len(scheduler.running), waiting=len(scheduler.waiting))

    def idle_point(self) -> None:
        """Between requests: the backend's shrink point (a compact policy finishes its moves), a tick."""
        engine = self.session.engine
        for event in timed_point(engine.backend, engine.shrink_tally, after_decode=False)[0]:
            self.emit(event)
        self.tick(self.steps, self.tokens)

    # ---- inspection ------------------------------------------------------------------------------------------
    def inspect(self, check: bool = True) -> dict:
        """The server's state now: requests, the pool's stats and the integrity checks' verdict (``check``)."""
        scheduler = self.session.scheduler
        state: dict = {"running": [s.request.req_id for s in scheduler.running],
                       "waiting": [r.req_id for r in scheduler.waiting], "steps": self.steps,
                       "tokens": self.tokens, "requests_finished": self.finished_total,
                       "live_sequences": sorted(self.session.backend.live_sequences()),
                       "backend": self.session.spec.backend, "t": time.monotonic()}
        if self.session.pool is not None:
            state["pool"] = self.session.pool.stats().to_dict()
        prefix = self.session.backend.prefix_cache
        if prefix is not None:
            state["prefix_cache"] = prefix.counters()
        if check:
            try:
                self.session.check_integrity()
                state["integrity"] = "ok"
            except AssertionError as exc:
                state["integrity"] = f"FAILED: {exc}"
        return state

    def close(self) -> None:
        """Cancel every request and release the session (pool, prefix cache, model hooks)."""
        for rid in list(self.live):
            self.cancel(Cancel(rid=rid, reason="shutdown"))
        self.session.close()


def _sampling(msg: Submit) -> Sampling | None:
    """The engine's greedy sampler (None) for temperature 0, else the request's own."""
    spec = msg.sampling
    if spec.temperature == 0.0:
        return None
    return Sampling(temperature=spec.temperature, top_p=spec.top_p, seed=spec.seed)


def _invalid(message: str, param: str | None, code: str | None = None) -> Rejected:
    return Rejected(rid=-1, status=400, type="invalid_request_error", message=message, param=param, code=code)


def build_serving(spec, loaded, limits: ServeLimits = ServeLimits(), *, prefix_cache_blocks: int | None = None,
                  emit=None, tick=None) -> ServingEngine:
    """A ``ServingEngine`` on a session of ``spec`` (``app.workloads.session.build_session``) for the loaded model.
    ``prefix_cache_blocks`` bounds the blocks the prefix cache keeps (least recently used go first): a server's
    finished prompts would otherwise pin K/V without end when the pool has no budget."""
    from app.workloads.session import build_session

    session = build_session(spec, SERVE_SCENARIO, loaded=loaded)
    prefix = session.backend.prefix_cache
    if prefix is not None and prefix_cache_blocks is not None:
        prefix.max_cached_blocks = prefix_cache_blocks
    return ServingEngine(session, limits, emit=emit, tick=tick)
