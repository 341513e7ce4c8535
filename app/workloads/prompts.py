"""Prompt token sources and the requests of a scenario phase.

Real models get real text: slices of the bundled corpus (``assets/corpus/*.txt``) at seeded offsets, through the
model's tokenizer, cut to the exact token count. Synthetic models (random weights, no meaningful vocabulary) get
seeded random token ids. Either way the same (scenario, seed) gives the same prompts on every backend.
"""

from __future__ import annotations

import random
from pathlib import Path
from app.workloads.scenarios import Phase
from app.workloads.scheduler import Request, Sequence

CORPUS_DIR = Path(__file__).resolve().parents[2] / "assets" / "corpus"


def load_corpus(directory: Path = CORPUS_DIR) -> str:
    """All corpus files joined by blank lines (sorted by name, so the text is the same everywhere)."""
    texts = [p.read_text(encoding="utf-8").strip() for p in sorted(directory.glob("*.txt"))]
    if not texts:
        raise FileNotFoundError(f"no corpus text under {directory}")
    return "\n\n".join(texts) + "\n\n"


class TokenSource:
    """Makes prompts of an exact token length. Owns its RNG (mutated on every call)."""

    def __init__(self, tokenizer=None, *, vocab_size: int | None = None, seed: int = 0, use_text: bool = True):
        self.rng = random.Random(seed)
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.use_text = use_text and tokenizer is not None
        if not self.use_text and not vocab_size:
            raise ValueError("a TokenSource without text needs vocab_size")
        self._corpus = load_corpus() if self.use_text else ""
        self._chars_per_token = 3.0

    def tokens(self, count: int) -> list[int]:
        """``count`` token ids: a corpus slice starting at a random offset, or random ids."""
        if count < 1:
            raise ValueError("count must be >= 1")
        if not self.use_text:
            # skip the lowest ids (specials in most vocabularies)
            return [self.rng.randrange(3, self.vocab_size) for _ in range(count)]
        start = self.rng.randrange(len(self._corpus))
        ids: list[int] = []
        chars = int(count * self._chars_per_token) + 64
        while len(ids) < count:
            text = _cyclic_slice(self._corpus, start, chars)
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            chars *= 2
        return ids[:count]


def _cyclic_slice(text: str, start: int, length: int) -> str:
    reps = (start + length) // len(text) + 1
    return (text * reps)[start:start + length] if reps > 1 else text[start:start + length]


def phase_requests(phase: Phase, source: TokenSource, *, first_id: int, shared: list[int] | None = None) -> list[Request]:
    """The requests a ``requests`` or ``conversation`` phase starts with (conversation turns chain later)."""
    if phase.kind == "requests":
        prefix = list(shared or [])[:phase.shared_prefix]
        if len(prefix) < phase.shared_prefix:
            raise ValueError("shared prefix shorter than the phase asks for")
        out = []
        for i in range(phase.count):
            length = source.rng.randint(*phase.prompt_tokens)
            gen = source.rng.randint(*phase.gen_tokens)
            out.append(Request(first_id + i, prefix + source.tokens(length), gen, phase.name))
        return out
    if phase.kind == "conversation":
        return [_turn(phase, source, first_id, [], 1, f"{phase.name}#{first_id}")]
    return []


def request_ids_used(phase: Phase) -> int:
    """Request ids a phase takes from the run's counter (a conversation numbers its turns)."""
    return max(phase.count, phase.turns)


def shared_prefix(scenario, source: TokenSource) -> list[int]:
    """The one system prompt every phase that asks for a prefix shares, drawn first from ``source`` (empty when no
    phase asks for one). Mutates ``source``'s random state."""
    longest = max((p.shared_prefix for p in scenario.phases), default=0)
    return source.tokens(longest) if longest else []


def scenario_phase_requests(scenario, source: TokenSource) -> list[tuple[Phase, list[Request]]]:
    """Every phase with its starting requests, in submission order, drawn as a run draws them (the shared prefix
    first, then each phase's requests from the same source, numbered as the run numbers them). A conversation's
    later turns are drawn while a run goes on, so a phase after a conversation phase may differ from the run's."""
    shared = shared_prefix(scenario, source)
    out, next_id = [], 0
    for phase in scenario.phases:
        out.append((phase, phase_requests(phase, source, first_id=next_id, shared=shared)))
        next_id += request_ids_used(phase)
    return out


def _turn(phase: Phase, source: TokenSource, req_id: int, history: list[int], turn: int, key: str) -> Request:
    """Turn ``turn`` of conversation ``key``: the history so far plus new user tokens; chains the next turn.
    Every turn but the last keeps its K/V for the next one (``kv_key``/``keep_kv``)."""
    prompt = history + source.tokens(source.rng.randint(*phase.prompt_tokens))
    gen = source.rng.randint(*phase.gen_tokens)

    def next_turn(seq: Sequence) -> list[Request]:
        if turn >= phase.turns:
            return []
        return [_turn(phase, source, req_id + 1, list(seq.tokens), turn + 1, key)]

    return Request(req_id, prompt, gen, phase.name, on_finish=next_turn, kv_key=key, keep_kv=turn < phase.turns)


def make_source(loaded, seed: int) -> TokenSource:
    """Corpus text for real tokenizers, random ids for synthetic models."""
    synthetic = str(loaded.name).startswith("synthetic:")
    return TokenSource(None if synthetic else loaded.tokenizer, vocab_size=loaded.vocab_size, seed=seed,
                       use_text=not synthetic)

