"""``RunSpec``: everything that defines one backend's run of a scenario (picklable, JSON-safe, mlx-free)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from app.workloads.cache_trim import DEFAULT_FRACTION as DEFAULT_TRIM_FRACTION
from app.workloads.inflight_bound import DEFAULT_ALLOWANCE as DEFAULT_INFLIGHT
from app.workloads.limits import check_rate
from pool.config import DEFAULT_BLOCK_SIZE, DEFAULT_SLAB_BLOCKS, OPEN_BLOCKS, PoolConfig
from pool.shrink_types import DEFAULT_SHRINK_BUDGET, SHRINK_MODES, ShrinkPolicy

BACKENDS = ("slab", "monolithic", "dense")
OPEN_BLOCKS_CHOICES = ("auto", *OPEN_BLOCKS)  # the pool's policies, plus "auto" (RunSpec.pool_open_blocks)


@dataclass(frozen=True)
class PoolChoice:
    """The pool a user picks for a live run (``tui``'s flags, the run form, a rank run): tokens per block, blocks per
    slab and the shrink policy; None takes the scenario's ``[pool]`` value, then ``pool.config``'s default
    (``resolved_pool_params``). The TUI carries this one type from its flags and form to the worker, whose
    ``RunSpec`` takes its fields and makes the ``PoolConfig`` (``RunSpec.pool_config``)."""

    block_size: int | None = None
    slab_blocks: int | None = None
    shrink: str = "off"

    def worker_params(self) -> dict:
        """``RunSpec`` keyword arguments (shrink only when asked: off is RunSpec's own default)."""
        params: dict = {"block_size": self.block_size, "slab_blocks": self.slab_blocks}
        return params if self.shrink == "off" else {**params, "shrink": self.shrink}

    def record_flags(self) -> list[str]:
        """The same choice as ``slabscope record`` flags (a live distributed run)."""
        flags = [] if self.shrink == "off" else ["--shrink", self.shrink]
        for flag, value in (("--block-size", self.block_size), ("--slab-blocks", self.slab_blocks)):
            if value is not None:
                flags += [flag, str(value)]
        return flags


@dataclass
class RunSpec:
    """One workload run. ``None`` pool fields take the scenario's ``[pool]`` suggestion, then the defaults below.

    ``overrides``: scenario parameter overrides (``--set k=v``). ``prefix_cache``: share full prompt blocks
    across requests (paged backends only; the dense baseline cannot share). ``max_blocks_per_layer``: pool budget.
    ``None`` for ``prefix_cache`` takes the scenario's choice (on where prompts share prefixes).
    """

    scenario: str = "churn"
    backend: str = "slab"
    model: str = "smollm2-135m"
    block_size: int | None = None
    slab_blocks: int | None = None
    prefill_chunk: int | None = None
    prefill_batch_tokens: int | None = None  # a prefill step's token budget over the chunks it batches (0: one)
    snapshot_hz: float = 2.0
    sample_hz: float = 10.0
    dtype: str | None = None
    device: str | None = None
    record_path: str | None = None
    record_force: bool = False  # replace a finished recording at record_path (never a live one: probes.outfile)
    record_claim: tuple[int, int] | None = None  # (device, inode) of the empty file the launching command claimed
                                                 # at record_path; the run's probes adopt it (probes.outfile.adopt)
    seed: int = 0
    overrides: dict = field(default_factory=dict)
    prefix_cache: bool | None = None  # None: the scenario's [pool] prefix_cache (default off)
    max_blocks_per_layer: int | None = None
    blas_threads: int | None = None  # OPENBLAS_NUM_THREADS in a worker process (1 when two run side by side)
    cache_limit: int | None = None  # MLX's buffer-cache limit in bytes (mx.set_cache_limit); None: MLX's default
    prefill_trim: float | str | None = "auto"  # trim MLX's cache between prefill chunks above this fraction of
                                               # (weights + cached K/V) (app/workloads/cache_trim.py); None: never;
                                               # "auto": only when prefill_inflight is off (``trim_fraction``)
    prefill_inflight: int | None = DEFAULT_INFLIGHT  # bytes a prefill chunk's encoding may hold in flight above
                                                     # weights + K/V storage (inflight_bound.py); None: unbounded
    shrink: str = "off"  # pool shrink policy: off | release | compact (pool/shrink_types.py; pool backends only)
    shrink_budget: int | None = None  # bytes a shrink point may move (all layers); None: the pool's default
    open_blocks: str = "auto"  # pool rows of open blocks: low | high (pool/config.py) | auto (``pool_open_blocks``)
    # meter the bytes reads copy out of the slabs with MLX's allocator (pool/gather_meter.py: a device wait per read,
    # so timing benchmarks leave it off and report the shape-derived figure); pool backends only
    measure_gathers: bool = False

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r} (choose one of {', '.join(BACKENDS)})")
        for name in ("block_size", "slab_blocks", "prefill_chunk", "max_blocks_per_layer"):
            value = getattr(self, name)
            if value is not None and not _positive_int(value):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.prefill_batch_tokens is not None and not _count(self.prefill_batch_tokens):
            raise ValueError(f"prefill_batch_tokens must be an int >= 0, got {self.prefill_batch_tokens!r}")
        check_rate(self.snapshot_hz, "snapshot_hz")
        check_rate(self.sample_hz, "sample_hz")
        if self.cache_limit is not None and (not isinstance(self.cache_limit, int) or self.cache_limit < 0):
            raise ValueError(f"cache_limit must be a byte count >= 0, got {self.cache_limit!r}")
        if self.shrink not in SHRINK_MODES:
            raise ValueError(f"unknown shrink policy {self.shrink!r} (choose one of {', '.join(SHRINK_MODES)})")
        if self.shrink_budget is not None and (not isinstance(self.shrink_budget, int)
                                               or isinstance(self.shrink_budget, bool) or self.shrink_budget < 0):
            raise ValueError(f"shrink_budget must be a byte count >= 0, got {self.shrink_budget!r}")
        if self.open_blocks not in OPEN_BLOCKS_CHOICES:
            raise ValueError(f"unknown open_blocks {self.open_blocks!r} "
                             f"(choose one of {', '.join(OPEN_BLOCKS_CHOICES)})")
        if self.prefill_trim not in (None, "auto") and not (isinstance(self.prefill_trim, (int, float))
                                                            and not isinstance(self.prefill_trim, bool)
                                                            and math.isfinite(self.prefill_trim)
                                                            and self.prefill_trim >= 0):
            raise ValueError(f"prefill_trim must be a fraction >= 0, 'auto' or None, got {self.prefill_trim!r}")
        if self.prefill_inflight is not None and (not isinstance(self.prefill_inflight, int)
                                                  or isinstance(self.prefill_inflight, bool)
                                                  or self.prefill_inflight < 0):
            raise ValueError(f"prefill_inflight must be a byte count >= 0 or None, got {self.prefill_inflight!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    def trim_fraction(self) -> float | None:
        """The cache trim's fraction this run uses: ``prefill_trim`` as given, and for "auto" none under the prefill
        in-flight bound (whose memory limit makes MLX's allocator give cached buffers back while a chunk is encoded,
        so a trim, which drains the device, buys no footprint: docs/prefill.md "In-flight bound"), else the trim's
        default fraction."""
        if self.prefill_trim != "auto":
            return self.prefill_trim
        return None if self.prefill_inflight is not None else DEFAULT_TRIM_FRACTION

    def shrink_policy(self) -> ShrinkPolicy:
        """The pool's shrink policy this run asks for."""
        budget = DEFAULT_SHRINK_BUDGET if self.shrink_budget is None else self.shrink_budget
        return ShrinkPolicy(self.shrink, budget)

    def reserves_ahead(self) -> bool:
        """True when the pool holds capacity for the running sequences' final lengths at admission: the slab
        design (its growth appends, so holding capacity early costs nothing but the capacity itself) without a
        shrink policy (which gives free slabs back, reserved ones included). The monolithic baseline keeps the
        origin's presize-per-span growth, the behaviour it exists to show."""
        return self.backend == "slab" and self.shrink == "off"

    def pool_config(self, num_layers: int, pool_params: dict) -> PoolConfig:
        """The pool this run builds for a model of ``num_layers`` layers: block and slab sizes resolved by
        ``resolved_pool_params`` (the spec's, else the scenario's, else ``PoolConfig``'s defaults), the spec's
        design, budget, shrink policy and open blocks. The one place a run's choices become a ``PoolConfig``."""
        return PoolConfig(num_layers=num_layers, block_size=pool_params["block_size"],
                          slab_blocks=pool_params["slab_blocks"], design=self.backend,
                          max_blocks_per_layer=self.max_blocks_per_layer, shrink=self.shrink_policy(),
                          open_blocks=self.pool_open_blocks())

    def pool_open_blocks(self) -> str:
        """The pool's ``open_blocks`` (pool/config.py): the spec's, or for "auto" "high" where the pool reserves
        ahead (its open blocks share the reservation's top slab, so a decode step's token writes touch one slab
        instead of one per sequence) and "low" elsewhere (without a reservation there is no top to share)."""
        if self.open_blocks != "auto":
            return self.open_blocks
        return "high" if self.reserves_ahead() else "low"


def prefill_batch_tokens_for(pool_params: dict, on_gpu: bool) -> int:
    """The prefill step's token budget a run uses: the spec's or scenario's, else the device's default."""
    chosen = pool_params.get("prefill_batch_tokens")
    return DEFAULT_PREFILL_BATCH_TOKENS["gpu" if on_gpu else "cpu"] if chosen is None else chosen


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


DEFAULT_PREFILL_CHUNK = 256  # the engine's (block and slab sizes default in pool.config, PoolConfig's fields)
# A prefill step's tokens over the chunks it batches (app/workloads/scheduler.py) on a GPU: 16 chunks of 512, half
# of one mlx-lm BatchGenerator prefill step (8 prompts x 2048). On a CPU one sequence per step: its matmuls are as
# busy at [1, L] as at [B, L], and a batch's other shapes change the summation order, so a prompt's K/V would
# depend on which prompts it was admitted with (byte parity with mlx-lm's per-prompt prefill holds at one).
DEFAULT_PREFILL_BATCH_TOKENS = {"gpu": 8192, "cpu": 0}


def resolved_pool_params(spec: RunSpec, scenario_pool: dict) -> dict:
    """block_size / slab_blocks / prefill_chunk / prefill_batch_tokens / prefix_cache: the spec's value, else the
    scenario's, else the default (``PoolConfig``'s for the pool's sizes; ``RunSpec.pool_config`` builds the pool's
    configuration from them; ``prefill_batch_tokens`` stays None for ``prefill_batch_tokens_for`` to choose)."""
    def pick(name: str, default: int) -> int:
        value = getattr(spec, name)
        if value is None:
            value = scenario_pool.get(name, default)
        if not _positive_int(value):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
        return value

    prefix = spec.prefix_cache if spec.prefix_cache is not None else scenario_pool.get("prefix_cache", False)
    if not isinstance(prefix, bool):
        raise ValueError(f"prefix_cache must be true or false, got {prefix!r}")
    from pool.prefill_policy import policy_from_env, prefill_chunk_for

    block_size, slab_blocks = pick("block_size", DEFAULT_BLOCK_SIZE), pick("slab_blocks", DEFAULT_SLAB_BLOCKS)
    chunk = prefill_chunk_for(pick("prefill_chunk", DEFAULT_PREFILL_CHUNK), block_size=block_size,
                              slab_blocks=slab_blocks,
                              pinned=spec.prefill_chunk is not None or policy_from_env() == "scenario")
    batch_tokens = spec.prefill_batch_tokens
    if batch_tokens is None:
        batch_tokens = scenario_pool.get("prefill_batch_tokens")
        if batch_tokens is not None and not _count(batch_tokens):
            raise ValueError(f"prefill_batch_tokens must be an int >= 0, got {batch_tokens!r}")
    return {"block_size": block_size, "slab_blocks": slab_blocks, "prefill_chunk": chunk,
            "prefill_batch_tokens": batch_tokens,
            "prefix_cache": prefix and spec.backend != "dense"}
