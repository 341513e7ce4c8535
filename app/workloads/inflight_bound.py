"""How much memory a prefill chunk may hold in flight: the run's storage and weights plus an allowance.

Why: the host encodes a chunk's operations (at its end, or layer by layer: app/workloads/layer_starts.py) and MLX
allocates their outputs as it encodes them, and a kernel's inputs stay allocated until the device has run it. The
host encodes a large chunk much faster than the device runs it, so at a batched step of 4,096 tokens on qwen3-0.6b
about 28 layers' temporaries (~1.1 MiB a token: projections, MLP, attention scores) are allocated together: the
ragged record's footprint peaked there, not at its largest K/V. MLX's own throttle is its memory limit: while active
memory is above ``mx.set_memory_limit``, evaluation waits for the oldest work in flight to finish before encoding
more (and its allocator gives cached buffers back first). This bound sets that limit around a prefill chunk's
encoding only, to what the run holds (weights + the backend's K/V storage, ``held_bytes()``) plus ``allowance``
bytes, and restores the previous limit right after: decode steps and everything else run under the limit in force
(MLX's default unless something else set one). A layer start is too small an evaluation for MLX's wait to fire, so
the layer starts' gate enforces the same limit itself (``LayerGate``). The device stays busy while the allowance
holds more work than the host needs to encode the next piece; a smaller allowance trades speed for footprint
(docs/prefill.md has the measured trade). The load-time rehearsal runs under the same bound.

The same bound runs on every backend of the engine (each says what it holds), so the backends stay comparable;
``allowance=None`` turns it off. mlx is imported lazily.
"""

from __future__ import annotations

from contextlib import contextmanager

# The default allowance, measured on the H200 (docs/prefill.md "In-flight bound"): at 2 GiB the ragged record's
# footprint fell from 0.33x to 0.27x dense's while the burst's and decode-heavy's prefill kept their speed; at 1 GiB
# the burst's prefill lost a quarter. Measured on qwen3-0.6b only: a model with wider layers may want more. The slab
# backends' chunks hold their gathered histories under it too: at 8 GiB slab's burst prefill was level with dense's,
# at 1.2-1.3x dense's 2 GiB footprint (docs/prefill.md "Slab sizes and the in-flight bound, interleaved").
DEFAULT_ALLOWANCE = 2 * 2**30
OFF_WORDS = ("off", "none", "no")  # what turns an optional run parameter off (None): this bound, the cache trim


def parse_allowance(text: str) -> int | None:
    """An allowance as a user writes it: a byte size (``0``, ``512M``, ``8G``: ``pool.units.parse_size``) or one of
    ``OFF_WORDS`` (None: unbounded). ValueError (one line) otherwise."""
    from pool.units import parse_size

    if text.strip().lower() in OFF_WORDS:
        return None
    return parse_size(text)


class InflightBound:
    """Owns the allowance, the largest limit it set and the run's counts (chunks encoded under it, the layer starts'
    waits); mutates MLX's memory limit only inside ``encoding``."""

    def __init__(self, *, weight_bytes: int, allowance: int | None = DEFAULT_ALLOWANCE):
        if allowance is not None and (not isinstance(allowance, int) or isinstance(allowance, bool) or allowance < 0):
            raise ValueError(f"the in-flight allowance must be a byte count >= 0 or None, got {allowance!r}")
        self.weight_bytes = int(weight_bytes)
        self.allowance = allowance
        self.bounded_chunks = 0
        self.max_limit = 0
        self.layer_start_waits = 0  # the layer starts' gate waited for older work (app/workloads/layer_starts.py)

    @property
    def active(self) -> bool:
        """Whether the bound is on (an allowance set)."""
        return self.allowance is not None

    def limit(self, held_bytes: int) -> int:
        """The memory limit for a chunk whose backend holds ``held_bytes`` of K/V storage."""
        return self.weight_bytes + int(held_bytes) + int(self.allowance or 0)

    @contextmanager
    def encoding(self, held_bytes: int, *, chunk: bool = True):
        """MLX's memory limit lowered to ``limit(held_bytes)`` (never raised above the limit in force) while the
        body encodes a chunk (``chunk``: counted in ``bounded_chunks``) or one of its layer starts
        (app/workloads/layer_starts.py), then restored; a no-op when the bound is off."""
        if self.allowance is None:
            yield
            return
        import mlx.core as mx

        previous = mx.get_memory_limit()
        limit = min(previous, self.limit(held_bytes))
        mx.set_memory_limit(limit)
        self.bounded_chunks += int(chunk)
        self.max_limit = max(self.max_limit, limit)
        try:
            yield
        finally:
            mx.set_memory_limit(previous)

    def summary(self) -> dict:
        return {"allowance_bytes": self.allowance, "bounded_chunks": self.bounded_chunks,
                "max_limit_bytes": self.max_limit, "layer_start_waits": self.layer_start_waits}
