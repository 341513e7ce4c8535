"""Paged decode attention over a :class:`pool.PagedKVPool` layer: the fused kernel of the running backend, or the
gather + SDPA path it replaces (also the reference the kernels are tested against).

Both take ``queries`` shaped [B, Hq, 1, D] (mlx-lm's decode layout) for the sequences ``seq_ids`` and return the
attention output in the same shape. Neither mutates the pool's storage; ``gather_decode`` goes through
``pool.gather_visible`` and so counts gathers like any other read. This module imports mlx only inside functions.
"""

from __future__ import annotations

from typing import Sequence

from pool.kernels.plan import DecodePlan, KernelUnsupported, plan_decode
from pool.kernels.tuning import DEFAULT_TUNING, KernelTuning
from pool.step_view import StepView


def plan_for_pool(pool, seq_ids: Sequence[int], *, scale: float, num_splits: int | None = None,
                  tuning: KernelTuning = DEFAULT_TUNING) -> DecodePlan:
    """The launch plan of ``seq_ids``: their block tables (physical rows), visible ranges [logical_start, length)
    and the slab geometry (``pool.step_view``), one plan for every layer, made with ``tuning``'s knobs. Reads the
    pool; changes nothing."""
    return plan_for_view(pool.step_view(seq_ids), scale=scale, num_splits=num_splits, tuning=tuning)


def plan_for_view(view: StepView, *, scale: float, num_splits: int | None = None,
                  tuning: KernelTuning = DEFAULT_TUNING) -> DecodePlan:
    """The launch plan of one step view (``PagedKVPool.step_view``): it serves every layer."""
    if not view.written:
        raise KernelUnsupported("the pool has no storage yet")
    return plan_decode(view.rows, view.lengths, view.logical_starts, block_size=view.block_size,
                       slab_blocks=view.rows_per_slab, num_slabs=view.num_slabs,
                       n_kv_heads=view.geometry.n_kv_heads, scale=scale, num_splits=num_splits, tuning=tuning)


def kernel_for_backend(backend: str):
    """The fused decode function of ``backend`` ("cuda" or "metal")."""
    if backend == "cuda":
        from pool.kernels.paged_decode_cuda import paged_decode_cuda
        return paged_decode_cuda
    if backend == "metal":
        from pool.kernels.paged_decode_metal import paged_decode_metal
        return paged_decode_metal
    raise KernelUnsupported(f"no fused kernel for backend {backend!r}")


# backend -> factory of its table-route kernel (``slab_table_cuda.CudaTableKernel``'s interface: ``name``,
# ``writer(dtype)``, ``prepare(queries, k_slabs, v_slabs, plan, meta)``). Tests register the CPU emulation's.
TABLE_KERNELS: dict = {}
_TABLE_INSTANCES: dict = {}


def table_kernel(backend: str):
    """The table-route kernel of ``backend``, or None when it takes each slab as an input (Metal; CUDA with
    SLABSCOPE_SLAB_TABLE=0)."""
    from pool.kernels.slab_table import table_route

    factory = TABLE_KERNELS.get(backend)
    if factory is None and backend == "cuda" and table_route():
        from pool.kernels.slab_table_cuda import CudaTableKernel

        factory = CudaTableKernel
    if factory is None:
        return None
    kernel = _TABLE_INSTANCES.get(factory)
    if kernel is None:
        kernel = _TABLE_INSTANCES[factory] = factory()
    return kernel


def table_decode(kernel, pool, layer: int, queries, plan: DecodePlan, meta=None, launches: dict | None = None):
    """The table route: refresh the layer's slab table (``slab_table.SlabTables``, kept in the pool's storage),
    then launch with the step's prepared launch (made at the first layer, kept in ``launches``). Mutates the
    table state and ``launches``; reads the pool."""
    from pool.kernels.slab_table import slab_tables

    keys, values = pool.slabs(layer)
    launches = {} if launches is None else launches
    launch = launches.get(kernel.name)
    if launch is None or launch.plan is not plan or not launch.fits(queries, keys, values):
        launch = launches[kernel.name] = kernel.prepare(queries, keys, values, plan, meta)
    storage = pool.storage
    tables = storage.kernel_state.get(kernel.name)
    if tables is None:
        dtype = str(keys[0].dtype).rsplit(".", 1)[-1]
        tables = slab_tables(storage, kernel.name, lambda: kernel.writer(dtype))
    return launch(queries, tables.table(storage, layer))


def fused_decode(pool, layer: int, seq_ids: Sequence[int], queries, *, scale: float, backend: str,
                 plan: DecodePlan | None = None, meta=None, launches: dict | None = None):
    """Fused paged attention of one new token per sequence, reading the layer's slabs in place. ``plan`` (and
    ``meta``, ``mx.array(plan.meta)``) may come from the caller, built once per step for every layer (a plan
    carries its tuning; without one, the default's).
    ``launches``: the caller's dict for that plan (kept for one step); on CUDA it holds the launch prepared at the
    plan's first layer (``CudaTableLaunch``, or ``CudaLaunch`` on the per-slab route), reused by each later layer
    (slab count, shapes, dtype: checked). CUDA reads the slabs through the layer's slab table
    (pool/kernels/slab_table.py) unless SLABSCOPE_SLAB_TABLE=0."""
    kernel = table_kernel(backend)
    if kernel is not None:
        plan = plan_for_pool(pool, seq_ids, scale=scale) if plan is None else plan
        return table_decode(kernel, pool, layer, queries, plan, meta, launches)
    keys, values = pool.slabs(layer)
    if plan is None:
        return kernel_for_backend(backend)(queries, keys, values, plan_for_pool(pool, seq_ids, scale=scale))
    if launches is None or backend != "cuda":
        return kernel_for_backend(backend)(queries, keys, values, plan, meta=meta)
    from pool.kernels.paged_decode_cuda import CudaLaunch

    launch = launches.get(backend)
    if launch is None or launch.plan is not plan or not launch.fits(queries, keys, values):
        launch = launches[backend] = CudaLaunch(queries, keys, values, plan, meta=meta)
    return launch(queries, keys, values)


def gather_decode(pool, layer: int, seq_ids: Sequence[int], queries, *, scale: float, upcast: bool = False):
    """Gather + SDPA: each sequence's visible K/V gathered from the slabs (one read per same-slab run,
    concatenated), then ``mx.fast.scaled_dot_product_attention``. Equal lengths run as one batched call, unequal
    ones per sequence. ``upcast=True`` computes and returns float32 (the high-precision reference)."""
    import mlx.core as mx

    gathered = [pool.gather_visible(layer, seq_id) for seq_id in seq_ids]
    keys = [g.keys for g in gathered]
    values = [g.values for g in gathered]
    q = queries.astype(mx.float32) if upcast else queries
    if upcast:
        keys = [k.astype(mx.float32) for k in keys]
        values = [v.astype(mx.float32) for v in values]
    if len({k.shape[1] for k in keys}) == 1:
        out = mx.fast.scaled_dot_product_attention(q, mx.stack(keys), mx.stack(values), scale=scale)
    else:
        out = mx.concatenate([
            mx.fast.scaled_dot_product_attention(q[i:i + 1], k[None], v[None], scale=scale)
            for i, (k, v) in enumerate(zip(keys, values))])
    return out
