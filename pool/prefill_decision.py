"""Prefill attention decision: per prefill chunk, read the history in place (the paged route,
``pool/prefill_attention.py``) or gather it (``PagedKVPool.gather_visible`` + mlx-lm's SDPA), and why. One
decision serves every layer of the chunk (one row space: every layer holds the same rows). Plain Python.

Reasons, checked in a fixed order, first match wins:

1. ``SLABSCOPE_PAGED_PREFILL=0`` in the environment -> gather ("disabled by ...").
2. the model's module does not call ``scaled_dot_product_attention`` by name (the paged SDPA cannot be installed)
   -> gather.
3. no history (the sequences' first chunk, one sequence or a batch) -> paged, "first chunk: own K/V only":
   nothing is read from the slabs.
4. a batched step (several sequences) with a history: the route reads one sequence's pieces -> gather.
5. a history without ``SLABSCOPE_PAGED_PREFILL=1`` -> gather (``REASON_OPT_IN``). Reading the history in place
   from MLX operations copies nothing (head-major slabs), but it measured slower than one gather: on the H200
   (qwen3-0.6b bf16, one 12,288-token prompt in 256-token chunks) 4,002 prefill tok/s paged against 17,202
   gathered, and on the CPU's tiny models too (`lab/paged_prefill/routes.py`, docs/prefill.md): ~11 graph operations
   and a float32 partial output per view cost more than the copy. So it is opt-in until a kernel reads the slabs.
6. the history lies in more than ``MAX_PIECES`` pieces (runs of consecutive rows in one slab): the route's graph
   grows by ~12 MLX operations per piece, so a fragmented table costs more host time than one gather -> gather.
Otherwise paged: "history read in place". The attention call itself may still fall back (a sliding-window mask or
attention sinks: ``app/workloads/prefill_attention.py``), counted under its own reason.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from pool.fused_decision import FusedDecision

ENV_VAR = "SLABSCOPE_PAGED_PREFILL"
MAX_PIECES = 64  # ~12 ops a piece: beyond this a fragmented history costs more graph than one gather copies
REASON_FIRST_CHUNK = "first chunk: own K/V only"
REASON_PAGED = "history read in place"  # one reason whatever the piece count (events carry the count)
REASON_NOT_ROUTABLE = "model module does not call scaled_dot_product_attention by name"
REASON_OPT_IN = f"history gathered (reading it in place is opt-in: {ENV_VAR}=1)"


def decide_prefill(*, pieces: int, batch_size: int, routable: bool, environ: dict | None = None) -> FusedDecision:
    """The route of one prefill chunk. ``pieces``: history pieces the route would read (0: no history)."""
    env = os.environ if environ is None else environ
    if env.get(ENV_VAR, "").strip() == "0":
        return FusedDecision(False, f"disabled by {ENV_VAR}=0")
    if not routable:
        return FusedDecision(False, REASON_NOT_ROUTABLE)
    if pieces == 0:  # the chunk's own K/V only: one SDPA call for any batch
        return FusedDecision(True, REASON_FIRST_CHUNK)
    if batch_size != 1:
        return FusedDecision(False, f"batched prefill of {batch_size} sequences")
    if env.get(ENV_VAR, "").strip() != "1":
        return FusedDecision(False, REASON_OPT_IN)
    if pieces > MAX_PIECES:
        return FusedDecision(False, f"history in {pieces} pieces, above {MAX_PIECES}")
    return FusedDecision(True, REASON_PAGED)


@dataclass
class PrefillDecisionCounters:
    """Outcome counts over layers (a chunk's decision counts once per layer), reasons with their counts and the
    decision in force (``last``). Mutated by :meth:`record` only."""

    paged: int = 0
    gather: int = 0
    by_reason: Counter = field(default_factory=Counter)
    last: FusedDecision | None = None

    def record(self, decision: FusedDecision, layers: int) -> None:
        if decision.use_fused:
            self.paged += layers
        else:
            self.gather += layers
        self.by_reason[decision.reason] += layers
        self.last = decision

    def reason_summary(self) -> str:
        """'reason xN; ...' over every reason so far (empty before the first chunk)."""
        return "; ".join(f"{reason} x{n}" for reason, n in self.by_reason.items())
