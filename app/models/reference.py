"""Stock mlx-lm greedy generation: the reference every paged-cache backend must match byte for byte.

``greedy_generate`` runs one sequence through mlx-lm's own ``make_prompt_cache`` (``KVCache`` per layer) and
follows ``mlx_lm.generate.generate_step``'s schedule exactly: the prompt minus its last token is prefilled in
chunks of ``prefill_step`` (2048, as stock), then the last prompt token alone produces the first logits, then one
token per step. It returns the raw last-position logits of every step (generate_step only exposes log-probs),
so parity tests can compare logits with ``mx.array_equal``. ``tests/models`` checks that its tokens and log-probs
equal generate_step's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

STOCK_PREFILL_STEP = 2048


@dataclass
class GreedyResult:
    tokens: list[int]          # generated token ids (the EOS token included when it stopped there)
    logits: list[Any]          # per generated token: the [vocab] logits it was argmax-ed from (model dtype)
    finish_reason: str         # "eos" or "length"
    cache: list[Any]           # the per-layer caches after the run (mlx-lm KVCache unless one was passed)


def logits_from_hidden(model, hidden):
    """LM head of an mlx-lm model applied to hidden states (tied embedding or ``lm_head``).

    Lets callers run ``model.model(...)`` and project only the positions they sample.
    """
    if getattr(model.args, "tie_word_embeddings", False):
        return model.model.embed_tokens.as_linear(hidden)
    return model.lm_head(hidden)


def greedy_generate(loaded, prompt_ids: Sequence[int], max_tokens: int, cache: list[Any] | None = None, *,
                    prefill_step: int = STOCK_PREFILL_STEP, stop_at_eos: bool = True) -> GreedyResult:
    """Greedy-decode ``max_tokens`` tokens after ``prompt_ids`` with stock mlx-lm caches.

    ``loaded`` is a ``LoadedModel``; ``cache`` (optional) is a list of per-layer cache objects to use instead of
    ``make_prompt_cache`` (it is mutated). Evaluates every step synchronously (no async overlap), which changes
    timing, not values.
    """
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    if len(prompt_ids) == 0:
        raise ValueError("greedy_generate needs at least one prompt token")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    model = loaded.model
    cache = make_prompt_cache(model) if cache is None else cache
    prompt = mx.array(list(prompt_ids), dtype=mx.uint32)
    for start in range(0, len(prompt) - 1, prefill_step):
        stop = min(start + prefill_step, len(prompt) - 1)
        model(prompt[start:stop][None], cache=cache)
        mx.eval([c.state for c in cache])
    tokens: list[int] = []
    logits_per_step: list[Any] = []
    next_input = prompt[-1:]
    eos = loaded.eos_token_ids if stop_at_eos else set()
    for _ in range(max_tokens):
        logits = model(next_input[None], cache=cache)[0, -1]
        token = mx.argmax(logits, axis=-1)
        mx.eval(logits, token)
        tokens.append(int(token.item()))
        logits_per_step.append(logits)
        if tokens[-1] in eos:
            return GreedyResult(tokens, logits_per_step, "eos", cache)
        next_input = token.reshape(1).astype(mx.uint32)
    return GreedyResult(tokens, logits_per_step, "length", cache)
