"""Per-request sampling for a batched decode step: greedy, or temperature and top-p with a per-request seed.

A server's batch mixes requests with different settings (OpenAI's ``temperature``, ``top_p``, ``seed``), so the
engine cannot use one sampler for the whole batch. ``sample_batch`` takes one ``Sampling`` per row (None: the
engine's own sampler, which is what ``slabscope run`` and ``generate`` use) and builds the step's tokens lazily:

* rows with ``temperature == 0`` (or no setting) are the argmax of their log-probabilities, exactly what mlx-lm's
  greedy sampler computes, so a greedy request gets the same tokens served as ``slabscope generate`` gives;
* rows with ``temperature > 0`` divide their log-probabilities by the temperature, keep the smallest set of tokens
  whose probability reaches ``top_p`` (``top_p == 1``: all of them), and draw with the Gumbel-max trick from a key
  that is a pure function of (seed, index of the token in the request's output). A seeded request therefore draws
  the same numbers whatever else shares its batch, and nothing here holds random state between steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import mlx.core as mx

MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class Sampling:
    """How one request picks its tokens. ``top_p`` in (0, 1]; ``seed`` None is not allowed here: the server draws
    one for an unseeded request, so every sampled row has its own stream."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if not (self.temperature >= 0.0 and self.temperature < float("inf")):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an int, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def token_key(seed: int, index: int) -> mx.array:
    """The PRNG key of token ``index`` of a request seeded with ``seed`` (splitmix64 of the pair: independent
    streams per seed, no state)."""
    z = (seed * 0x9E3779B97F4A7C15 + (index + 1) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return mx.random.key(z ^ (z >> 31))


def sample_batch(logprobs: mx.array, settings: list[Sampling | None], token_indices: list[int],
                 default: Callable[[mx.array], mx.array]) -> mx.array:
    """Tokens [B] for ``logprobs`` [B, vocab]: row i by ``settings[i]`` (None: ``default``, the engine's sampler,
    applied to the whole batch), drawing its token number ``token_indices[i]``. Lazy; reads nothing back."""
    if all(s is None for s in settings):
        return default(logprobs)
    base = default(logprobs) if any(s is None for s in settings) else mx.argmax(logprobs, axis=-1)
    rows = [i for i, s in enumerate(settings) if s is not None and not s.greedy]
    greedy_rows = [i for i, s in enumerate(settings) if s is not None and s.greedy]
    if greedy_rows and any(s is None for s in settings):  # the default may not be greedy: set these rows apart
        index = mx.array(greedy_rows)
        base[index] = mx.argmax(logprobs[index], axis=-1).astype(base.dtype)
    if not rows:
        return base
    index = mx.array(rows)
    drawn = draw(logprobs[index], [settings[i] for i in rows], [token_indices[i] for i in rows])
    base[index] = drawn.astype(base.dtype)
    return base


def draw(logprobs: mx.array, settings: list[Sampling], token_indices: list[int]) -> mx.array:
    """One token per row of ``logprobs`` [k, vocab], each row by its own temperature, top-p and key."""
    temps = mx.array([[s.temperature] for s in settings], dtype=mx.float32)
    scaled = logprobs.astype(mx.float32) / temps
    top_p = [s.top_p for s in settings]
    if any(p < 1.0 for p in top_p):
        scaled = top_p_filter(scaled, mx.array([[p] for p in top_p], dtype=mx.float32))
    vocab = scaled.shape[-1]
    noise = mx.stack([mx.random.gumbel(shape=(vocab,), key=token_key(s.seed, i))
                      for s, i in zip(settings, token_indices)])
    return mx.argmax(scaled + noise, axis=-1)


def top_p_filter(scaled: mx.array, top_p: mx.array) -> mx.array:
    """``scaled`` [k, vocab] with every token outside its row's nucleus set to -inf: the nucleus is the fewest most
    probable tokens whose probabilities sum to at least ``top_p`` [k, 1] (the most probable one always stays)."""
    probs = mx.softmax(scaled, axis=-1)
    ordered = mx.sort(probs, axis=-1)[:, ::-1]
    before = mx.cumsum(ordered, axis=-1) - ordered  # mass of the more probable tokens
    kept = mx.sum(before < top_p, axis=-1, keepdims=True)  # >= 1: the first token has nothing before it
    threshold = mx.take_along_axis(ordered, kept - 1, axis=-1)
    return mx.where(probs >= threshold, scaled, -mx.inf)
