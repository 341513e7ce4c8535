"""The prefill chunk size (plain Python): the one rule every backend's scheduler takes its chunk from.

Rule: a chunk the user pins (``--prefill-chunk``) is used as given. Otherwise the suggestion (the scenario's
``[pool] prefill_chunk``, else the engine's default) is raised to at least one slab's tokens (``block_size x
slab_blocks``), rounded up to a whole number of suggestions. Why: every chunk re-reads its whole history. On the
gather route each chunk copies it (bytes per prompt ~ prompt^2 / chunk); on the paged route each chunk costs ~11
MLX operations per history piece per layer (pool/prefill_attention.py), and a piece is at most a slab, so chunks
shorter than a slab pay more graph per token than they save in score-tile memory. All backends take the same chunk
(dense included), so a comparison runs one schedule.

Switch: ``SLABSCOPE_PREFILL_CHUNK_POLICY=slab`` applies the rule; unset (or ``scenario``) keeps the suggestion as
it is, the schedule every recorded comparison so far ran. It stays opt-in until the H200 measurement
(lab/paged_prefill) shows the larger chunk pays on the issue's workloads.
"""

from __future__ import annotations

import os

ENV_VAR = "SLABSCOPE_PREFILL_CHUNK_POLICY"
POLICIES = ("scenario", "slab")


def policy_from_env(environ: dict | None = None) -> str:
    """The chunk policy in force ("scenario" | "slab"); ValueError naming the variable for anything else."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "scenario").strip() or "scenario"
    if value not in POLICIES:
        raise ValueError(f"{ENV_VAR} must be one of {', '.join(POLICIES)}, got {value!r}")
    return value


def prefill_chunk_for(suggested: int, *, pinned: bool, block_size: int, slab_blocks: int) -> int:
    """The chunk (tokens) a run uses: ``suggested`` if ``pinned``, else at least one slab's tokens."""
    if pinned:
        return suggested
    slab_tokens = block_size * slab_blocks
    if suggested >= slab_tokens:
        return suggested
    return -(-slab_tokens // suggested) * suggested
