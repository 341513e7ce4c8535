"""What a run generated, as plain data: the tokens of every request and one digest over them (mlx-free).

The digest makes "same output" a one-field comparison between recordings (slab vs dense, 2 ranks vs 1); the
token lists say where two runs part. Requests are keyed by ``req_id`` (drawn from the run's seed, so equal across
backends and ranks); sequences still running are included with what they generated so far.
"""

from __future__ import annotations

import hashlib
import json


def generated_tokens(sequences) -> dict[str, list[int]]:
    """``{str(req_id): generated token ids}`` of ``sequences`` (scheduler ``Sequence`` objects), by request id."""
    return {str(s.request.req_id): [int(t) for t in s.generated]
            for s in sorted(sequences, key=lambda s: s.request.req_id)}


def digest_of(generated: dict[str, list[int]]) -> str:
    """A stable hex digest of ``{req_id: tokens}`` (independent of dict order)."""
    canonical = json.dumps(sorted((int(k), v) for k, v in generated.items()), separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


MAX_LISTED_TOKENS = 200_000  # above this the summary keeps the digest only (a summary travels whole to the TUI)


def outputs_summary(finished, running=()) -> dict:
    """The ``outputs`` block of a run summary: request and token counts, digest, and the tokens themselves
    (``generated`` is None when they exceed ``MAX_LISTED_TOKENS``)."""
    generated = generated_tokens([*finished, *running])
    count = sum(len(v) for v in generated.values())
    return {"requests": len(generated), "generated_tokens": count, "digest": digest_of(generated),
            "generated": generated if count <= MAX_LISTED_TOKENS else None}
