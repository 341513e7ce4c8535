"""Layer starts: each layer's K/V of a prefill chunk goes to the device as soon as the model has built it.

Why: MLX evaluates lazily, so without a start the host builds a chunk's whole graph (every layer) and the device
gets it in one ``mx.async_eval`` at the chunk's end: a chunk's device time could begin only after its host build,
and the two overlapped only across chunks. Starting a layer's K/V (``mx.async_eval`` of what the layer's cache hands
to attention, which depends on everything before it in the layer and on the cache writes) lets the device run a
chunk's early layers while the host still builds its later ones. Each start goes through the chunk's
:class:`LayerGate`: the prefill in-flight bound (app/workloads/inflight_bound.py) with what the backend holds at that
moment, enforced by waiting for the oldest started layer while MLX's active memory is above it, so a chunk's
temporaries stay within the allowance whichever start encodes them; the engine still waits for a chunk before the
next but one. Every backend starts its layers the same way: the paged step after its writes and reads
(``PagedLayerCache.update_and_fetch``), the dense baseline through :class:`PrefillKVCache` (mlx-lm's ``KVCache``, whose
update is unchanged). Nothing here changes what is computed, only when it is sent, so every byte is what it was
(the parity tests run with starts on).

Measured on one H200 (docs/prefill.md "Layer starts"): llama-0.8b's batched prefill under the 2 GiB bound rose from
243k to 316k tok/s for slab at 128 rows a slab (5,040 -> 5,418 MiB) and from 268k to 336k for dense; the burst's
slab:128 from 161.5k to 225.6k across two builds. ``SLABSCOPE_PREFILL_LAYER_STARTS=0`` turns the starts off (the
A/B the lab's anatomy runs). Decode steps and one-token chunks are never started per layer: their graph is small
and the engine pipelines whole steps.
"""

from __future__ import annotations

import os
from collections import deque
from contextlib import contextmanager
from typing import Callable, Iterator

import mlx.core as mx
from mlx_lm.models.cache import KVCache

ENV_VAR = "SLABSCOPE_PREFILL_LAYER_STARTS"

# The gate of the prefill chunk the engine is building (its layer starts go through it), or None: unbounded.
# One engine builds at a time in a process.
_gate: "LayerGate | None" = None


def layer_starts_on(environ: dict | None = None) -> bool:
    """Whether prefill chunks start their layers one by one (default) or the whole chunk at its end (``=0``)."""
    env = os.environ if environ is None else environ
    return env.get(ENV_VAR, "1").strip() != "0"


class LayerGate:
    """One prefill chunk's layer starts under the in-flight bound. Owns a marker per started layer (a one-element
    array computed after the layer's K and V, so it is done once they are) and the count of waits; mutates MLX's
    memory limit only inside each start (``InflightBound.encoding``).

    Why a gate of our own: MLX's evaluation waits for older work while active memory is above its limit, but it
    counts work in flight at its command-buffer commits, and one layer's evaluation is too small to commit before
    it returns, so layer starts never waited: measured on the H200, the llama-0.8b workload's footprint doubled
    (4,938 -> 10,586 MiB) under a 2 GiB allowance. Before each start the gate waits for the oldest started layer (the
    previous chunk first), then the next, while active memory is above the limit: MLX's own rule, one layer at a
    time."""

    def __init__(self, bound, held_bytes: Callable[[], int], in_flight: mx.array | None = None):
        self.bound = bound
        self.held_bytes = held_bytes
        self._started: deque = deque([] if in_flight is None else [in_flight])
        self.waits = 0

    def start(self, keys: mx.array, values: mx.array) -> None:
        """Wait while over the limit, then send ``keys``/``values`` and everything they depend on to the device."""
        held = self.held_bytes()
        limit = self.bound.limit(held)
        while self._started and mx.get_active_memory() > limit:
            mx.eval(self._started.popleft())
            self.waits += 1
        marker = keys[:1, :1, :1, :1] + values[:1, :1, :1, :1]
        with self.bound.encoding(held, chunk=False):
            mx.async_eval(keys, values, marker)
        self._started.append(marker)


@contextmanager
def starting_under(gate: LayerGate | None) -> Iterator[None]:
    """Every layer start inside the body goes through ``gate`` (None: unbounded). Restores the previous gate after."""
    global _gate
    saved, _gate = _gate, gate
    try:
        yield
    finally:
        _gate = saved


def start_layer(keys: mx.array, values: mx.array) -> None:
    """Send a prefill chunk layer's ``keys``/``values`` (what attention reads, [B, H, T, D]) and everything they
    depend on to the device now, through the chunk's gate when the engine set one (:func:`starting_under`).
    Callers pass prefill chunks only (more than one new token). Mutates nothing the caller holds."""
    if not layer_starts_on():
        return
    if _gate is None:
        mx.async_eval(keys, values)
        return
    _gate.start(keys, values)


class PrefillKVCache(KVCache):
    """mlx-lm's ``KVCache`` for the dense baseline's prefill: the same update, then the layer start of a chunk of
    more than one token (:func:`start_layer`)."""

    @classmethod
    def adopt(cls, cache: KVCache) -> "PrefillKVCache":
        """A prefill cache holding ``cache``'s arrays and offset (no copy): a kept conversation turn's K/V, so
        the next turn's prefill starts its layers as a first turn's does."""
        own = cls()
        own.keys, own.values, own.offset = cache.keys, cache.values, cache.offset
        return own

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        visible_keys, visible_values = super().update_and_fetch(keys, values)
        if keys.shape[2] > 1:
            start_layer(visible_keys, visible_values)
        return visible_keys, visible_values
