"""What ``slabscope load`` sends: a scenario's requests as HTTP requests (mlx-free, no I/O but the corpus).

A scenario (``app.workloads.scenarios``) says, per phase, how many requests, how many in flight at once, their
prompt and generation lengths, a shared prefix, idle pauses and conversations. ``plan_load`` draws them from a seed
exactly as the workloads draw theirs (per request: the prompt length, then the generation length) and makes each
prompt from the bundled corpus at a random offset, so two prompts share nothing but the scenario's shared prefix.

A prompt of N tokens is text that the server's tokenizer reads as N tokens: with a tokenizer (``TokenCounter``
from a ``tokenizer.json``), corpus text is cut at exactly N tokens; without one, N tokens are taken as
``chars_per_token * N`` characters (1.0 is exact for byte tokenizers, such as the model directories
``app.models.model_dir`` writes). The servers' own count of prompt tokens (``usage``) is what the report shows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from app.workloads.prompts import load_corpus
from app.workloads.scenarios import Scenario


@dataclass(frozen=True)
class PlannedRequest:
    """One HTTP request: ``prompt`` text of about ``prompt_tokens`` tokens, ``max_tokens`` to generate."""

    index: int
    phase: str
    prompt: str
    prompt_tokens: int
    max_tokens: int


@dataclass(frozen=True)
class PlannedPhase:
    """A phase: its requests (run ``concurrency`` at a time), a pause (``idle_s``), or a conversation (``turns``
    requests one after the other, each carrying the conversation so far)."""

    name: str
    kind: str
    concurrency: int = 1
    requests: list[PlannedRequest] = field(default_factory=list)
    idle_s: float = 0.0


class TokenCounter:
    """A Hugging Face ``tokenizers`` tokenizer read from ``tokenizer.json`` (a file, or a directory holding one):
    what ``--tokenizer`` gives ``load`` to cut prompts at an exact token count."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        try:
            self.tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:  # noqa: BLE001 - a user's file: what the library says, in one line
            raise ValueError(f"cannot read a tokenizer from {file}: {exc}") from None

    def cut(self, text: str, tokens: int) -> str:
        """The leading text of ``text`` that encodes to ``tokens`` tokens (``text`` must be long enough)."""
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        if len(encoding.ids) < tokens:
            raise ValueError(f"text of {len(encoding.ids)} tokens is shorter than {tokens}")
        return text[:encoding.offsets[tokens - 1][1]]


class PromptMaker:
    """Makes prompt texts of a token length from the corpus; owns its random offsets (seeded)."""

    def __init__(self, rng: random.Random, counter: TokenCounter | None = None, chars_per_token: float = 4.0) -> None:
        self.rng = rng
        self.counter = counter
        self.chars_per_token = chars_per_token
        self.corpus = load_corpus()

    def text(self, tokens: int) -> str:
        start = self.rng.randrange(len(self.corpus))
        if self.counter is None:
            return self._slice(start, max(1, round(tokens * self.chars_per_token)))
        chars = tokens * 8 + 64
        while True:  # grows until the slice holds enough tokens (bounded: every token takes at least one char)
            try:
                return self.counter.cut(self._slice(start, chars), tokens)
            except ValueError:
                if chars > tokens * 64 + 4096:
                    raise
                chars *= 2

    def _slice(self, start: int, length: int) -> str:
        corpus = self.corpus
        reps = (start + length) // len(corpus) + 1
        return (corpus * reps)[start:start + length]


def plan_load(scenario: Scenario, seed: int = 0, counter: TokenCounter | None = None,
              chars_per_token: float = 4.0) -> list[PlannedPhase]:
    """Every phase of ``scenario`` as planned HTTP requests (see the module docstring)."""
    rng = random.Random(seed)
    maker = PromptMaker(rng, counter, chars_per_token)
    longest = max((p.shared_prefix for p in scenario.phases), default=0)
    shared = maker.text(longest) if longest else ""
    phases, index = [], 0
    for phase in scenario.phases:
        if phase.kind == "idle":
            phases.append(PlannedPhase(phase.name, "idle", idle_s=phase.seconds))
            continue
        count = phase.count if phase.kind == "requests" else phase.turns
        requests = []
        for _ in range(count):
            length = rng.randint(*phase.prompt_tokens)
            gen = rng.randint(*phase.gen_tokens)
            prefix = _prefix_of(shared, phase.shared_prefix, counter, chars_per_token) if phase.kind == "requests" \
                else ""
            requests.append(PlannedRequest(index, phase.name, prefix + maker.text(length),
                                           phase.shared_prefix + length if phase.kind == "requests" else length, gen))
            index += 1
        phases.append(PlannedPhase(phase.name, phase.kind, phase.concurrency, requests))
    return phases


def _prefix_of(shared: str, tokens: int, counter: TokenCounter | None, chars_per_token: float) -> str:
    if tokens == 0:
        return ""
    if counter is None:
        return shared[:max(1, round(tokens * chars_per_token))]
    return counter.cut(shared, tokens)
