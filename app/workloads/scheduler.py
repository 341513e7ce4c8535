"""Request scheduling for the live workloads: admission, chunked prefill, batched decode, completion.

Plain Python (no mlx): the scheduler decides *what* each forward pass computes; the engine runs it on a KV
backend. The same plan drives the paged (slab/monolithic) and dense backends, which is what makes them
comparable byte for byte.

Conventions (the same as mlx-lm's ``generate_step``): a prompt's first ``len - 1`` tokens are prefilled without
logits, in chunks whose boundaries sit at multiples of ``prefill_chunk`` in absolute positions (so a sequence
that starts from a shared prefix computes exactly the chunks a cold sequence would after that point); the last
prompt token is the first decode input. A sequence's cache holds ``tokens[:num_cached]``; the most recently
sampled token is never in the cache until it is fed back.

Policy: FIFO admission while ``running < concurrency`` and the backend can hold the prompt; prefill has
priority over decode (the next chunk of the oldest prefilling sequence per step, nano-vllm style); otherwise all
decoding sequences advance together in admission order. A prefill step takes along, in admission order, every
other prefilling sequence whose next chunk has the same start and length, while the step's tokens stay within
``prefill_batch_tokens`` (0: one sequence per step): one forward of [B, L] instead of B forwards of [1, L], as
mlx-lm's BatchGenerator prefills its prompts together. Chunk boundaries sit at the same absolute positions for
every sequence, so sequences admitted together keep meeting at the same starts (ragged prompts part at their last,
shorter chunk).

Serving (``app/serve``) adds requests while others run (``submit`` between steps), ends a request early
(``cancel``: a client that went away, a stop string), gives each request its own stop condition (``stop_when``)
and sampling (``sampling``, read by the engine), and hands a request that cannot fit even an empty pool to
``reject_fn`` instead of raising. Every sequence says why it finished (``finish_reason``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

FINISH_REASONS = ("length", "stop", "cancelled")


@dataclass
class Request:
    """One generation request: ``prompt`` token ids, ``max_new_tokens`` to sample, the phase it belongs to."""

    req_id: int
    prompt: list[int]
    max_new_tokens: int
    phase: str = ""
    on_finish: Callable[["Sequence"], Iterable["Request"]] | None = None  # follow-up requests (multiturn)
    stop_tokens: frozenset[int] = frozenset()  # sampling one of these ends the request (EOS for generation)
    kv_key: str | None = None  # conversation whose kept K/V this request resumes from / keeps (multiturn)
    keep_kv: bool = False      # keep this request's K/V after it finishes (a later turn resumes from it)
    sampling: Any = None       # app.workloads.sampling.Sampling of this request (None: the engine's sampler)
    # called with the sequence after each sampled token is appended; True ends the request ("stop")
    stop_when: Callable[["Sequence"], bool] | None = None

    def __post_init__(self):
        if not self.prompt:
            raise ValueError(f"request {self.req_id}: empty prompt")
        if self.max_new_tokens < 1:
            raise ValueError(f"request {self.req_id}: max_new_tokens must be >= 1")

    @property
    def final_cached_tokens(self) -> int:
        """Tokens its K/V holds at the end: the prompt and every sampled token but the last (never fed back)."""
        return len(self.prompt) + self.max_new_tokens - 1


@dataclass
class Sequence:
    """A request being served. ``tokens`` = prompt + generated; ``num_cached`` tokens have K/V in the backend."""

    seq_id: int
    request: Request
    tokens: list[int]
    num_cached: int = 0
    num_shared: int = 0  # tokens taken from the prefix cache at admission
    generated: list[int] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None  # one of FINISH_REASONS once finished

    @property
    def prefill_end(self) -> int:
        return len(self.request.prompt) - 1

    @property
    def in_prefill(self) -> bool:
        return self.num_cached < self.prefill_end


@dataclass(frozen=True)
class PrefillPlan:
    """A prefill step: every sequence of ``seqs`` writes ``num_tokens`` prompt tokens from ``start``."""

    seqs: tuple[Sequence, ...]
    start: int
    num_tokens: int

    @property
    def total_tokens(self) -> int:
        return len(self.seqs) * self.num_tokens


@dataclass(frozen=True)
class DecodeBatch:
    """The sequences one decode step advances by one token each (the kernels' launch plan is
    ``pool.kernels.plan.DecodePlan``)."""

    seqs: tuple[Sequence, ...]

    @property
    def starts(self) -> list[int]:
        return [s.num_cached for s in self.seqs]


class Scheduler:
    """Owns the waiting queue and the running sequences; mutates them in ``admit``/``plan``/``complete_*``.

    ``admit_fn(seq) -> bool`` asks the backend to take a new sequence (it may attach a cached prefix and set
    ``seq.num_cached``/``seq.num_shared``); False means "not now" (budget), and the request waits.
    ``release_fn(seq)`` drops a finished sequence from the backend. ``reject_fn(request)`` (optional) takes a
    request the backend refuses with nothing else running (it can never fit); without it that is a RuntimeError.
    """

    def __init__(self, *, prefill_chunk: int, admit_fn: Callable[[Sequence], bool],
                 release_fn: Callable[[Sequence], None], reject_fn: Callable[[Request], None] | None = None,
                 prefill_batch_tokens: int = 0):
        if prefill_chunk < 1:
            raise ValueError("prefill_chunk must be >= 1")
        if prefill_batch_tokens < 0:
            raise ValueError("prefill_batch_tokens must be >= 0")
        self.prefill_chunk = prefill_chunk
        self.prefill_batch_tokens = prefill_batch_tokens
        self.admit_fn = admit_fn
        self.release_fn = release_fn
        self.reject_fn = reject_fn
        self.waiting: deque[Request] = deque()
        self.running: list[Sequence] = []
        self.finished: list[Sequence] = []
        self.concurrency = 1
        self._next_seq_id = 0

    def submit(self, requests: Iterable[Request]) -> None:
        self.waiting.extend(requests)

    def set_concurrency(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.concurrency = concurrency

    def idle(self) -> bool:
        return not self.waiting and not self.running

    def may_admit(self) -> bool:
        """True when ``admit`` would try a waiting request (one waits and concurrency has room; the backend may
        still refuse it)."""
        return bool(self.waiting) and len(self.running) < self.concurrency

    def decode_comes_next(self) -> bool:
        """True when the next plan will be a decode step: no running sequence is still prefilling and admission
        cannot start a new one."""
        return not self.may_admit() and not any(seq.in_prefill for seq in self.running)

    def admit(self) -> list[Sequence]:
        """Move waiting requests into ``running`` while concurrency and the backend allow (FIFO, no overtaking)."""
        admitted = []
        while self.may_admit():
            request = self.waiting[0]
            seq = Sequence(self._next_seq_id, request, list(request.prompt))
            if not self.admit_fn(seq):
                if not self.running and self.reject_fn is not None:
                    self.waiting.popleft()  # it can never fit: the next request may
                    self.reject_fn(request)
                    continue
                if not self.running:
                    raise RuntimeError(
                        f"request {request.req_id} ({len(request.prompt)} prompt tokens) does not fit the pool "
                        "budget even with nothing else running")
                break
            self._next_seq_id += 1
            self.waiting.popleft()
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def plan(self) -> PrefillPlan | DecodeBatch | None:
        """The next forward pass: the oldest prefilling sequence's next chunk (with the sequences whose next chunk
        has the same shape, within ``prefill_batch_tokens``), else one decode step."""
        prefilling = [seq for seq in self.running if seq.in_prefill]
        if prefilling:
            first = prefilling[0]
            start, length = first.num_cached, self._chunk_length(first)
            group = [first]
            for seq in prefilling[1:]:
                if (len(group) + 1) * length > self.prefill_batch_tokens:
                    break
                if seq.num_cached == start and self._chunk_length(seq) == length:
                    group.append(seq)
            return PrefillPlan(tuple(group), start, length)
        decoding = tuple(s for s in self.running if not s.finished)
        return DecodeBatch(decoding) if decoding else None

    def _chunk_length(self, seq: Sequence) -> int:
        """Tokens of ``seq``'s next prefill chunk: to the next multiple of ``prefill_chunk``, or its prompt's end."""
        start = seq.num_cached
        return min((start // self.prefill_chunk + 1) * self.prefill_chunk, seq.prefill_end) - start

    def complete_prefill(self, plan: PrefillPlan) -> None:
        for seq in plan.seqs:
            seq.num_cached = plan.start + plan.num_tokens

    def complete_decode(self, plan: DecodeBatch, sampled: list[int]) -> list[Sequence]:
        """Record one sampled token per sequence; finished sequences are released and returned. A sequence that
        finished before this step completed (a stop token in the step before, whose successor was already
        dispatched) gets nothing: its token is past its end."""
        if len(sampled) != len(plan.seqs):
            raise ValueError("one sampled token per decoding sequence")
        done = []
        for seq, token in zip(plan.seqs, sampled):
            if seq.finished:
                continue
            seq.num_cached += 1
            seq.generated.append(int(token))
            seq.tokens.append(int(token))
            request = seq.request
            if int(token) in request.stop_tokens or (request.stop_when is not None and request.stop_when(seq)):
                seq.finish_reason = "stop"
            elif len(seq.generated) >= request.max_new_tokens:
                seq.finish_reason = "length"
            else:
                continue
            done.append(seq)
        for seq in done:
            self.finish(seq)
        return done

    def finish(self, seq: Sequence, reason: str | None = None) -> None:
        """Mark ``seq`` finished (``reason`` overrides the one its last token gave), release it from the backend
        and enqueue its follow-ups (multiturn; not for a cancelled request)."""
        seq.finished = True
        if reason is not None:
            seq.finish_reason = reason
        self.running.remove(seq)
        self.release_fn(seq)
        self.finished.append(seq)
        if seq.request.on_finish is not None and seq.finish_reason != "cancelled":
            self.submit(seq.request.on_finish(seq))

    def cancel(self, req_id: int) -> Sequence | Request | None:
        """End request ``req_id`` now: a waiting request leaves the queue (returned as is), a running sequence is
        finished as "cancelled" and released from the backend (returned). None when no such request is waiting or
        running. The caller makes sure no dispatched step still writes for it (``Engine.cancel`` does)."""
        for request in self.waiting:
            if request.req_id == req_id:
                self.waiting.remove(request)
                return request
        for seq in self.running:
            if seq.request.req_id == req_id:
                self.finish(seq, "cancelled")
                return seq
        return None

    def check_integrity(self) -> None:
        """Raise AssertionError if the scheduler's own state is inconsistent."""
        ids = [s.seq_id for s in self.running]
        assert len(ids) == len(set(ids)), "duplicate running sequence"
        assert len(self.running) <= self.concurrency, "more sequences running than the concurrency allows"
        for seq in self.running:
            assert not seq.finished, f"finished sequence {seq.seq_id} still running"
            assert 0 <= seq.num_cached <= len(seq.tokens), f"sequence {seq.seq_id}: bad num_cached"
            assert seq.tokens[: len(seq.request.prompt)] == seq.request.prompt
