"""Fused paged-decode kernel vs the gather + SDPA path, on the GPU backend that is present (CUDA or Metal).

B in {1, 4, 8, 16} x context in {1k, 4k, 16k} x tables {single slab, multi-slab, fragmented}, bf16, head_dim 128
and GQA 16/8 (qwen3-0.6b's geometry); plus fp16 / head_dim 64 / GQA 4 and ragged lengths with a logical start.

Error measure: ``max|fused - ref| / max|ref|`` over the whole output, against (a) a float32 gather + SDPA path
(the high-precision reference) and (b) the gather path in the storage dtype. The kernel accumulates in float32 in
another order than SDPA and rounds its output once to the storage dtype (relative 2^-9 for bf16, 2^-12 for
fp16), so against (a) it must stay within TOLERANCE = 2^-7 (bf16) / 2^-9 (fp16): a few roundings with margin.
The half-precision gather path has its own error against (a) (some SDPA back-ends round the softmax weights to
the storage dtype before P.V), measured and reported as ``gather_rel_err_vs_fp32``; against (b) the assertion is
the triangle bound ``err_vs_gather <= gather_err_vs_fp32 + TOLERANCE``.
With ``SLABSCOPE_GPU_REPORT=path`` every case's errors are appended to that file as JSON lines.
"""

from __future__ import annotations

import json
import os

import pytest

mx = pytest.importorskip("mlx.core")


def _backend() -> str | None:
    if mx.default_device().type != mx.DeviceType.gpu:
        return None
    if mx.cuda.is_available():
        return "cuda"
    if mx.metal.is_available():
        return "metal"
    return None


BACKEND = _backend()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    BACKEND is None, reason="needs an MLX GPU backend: CUDA (mx.cuda.is_available()) or Metal "
                            "(mx.metal.is_available()); this machine has neither, so the fused kernel cannot run")]

TOLERANCE = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -9}


def _errors(out, ref) -> float:
    out32, ref32 = out.astype(mx.float32), ref.astype(mx.float32)
    return float(mx.max(mx.abs(out32 - ref32)).item() / max(mx.max(mx.abs(ref32)).item(), 1e-30))


def _report(record: dict, tuning=None) -> None:
    """Append ``record`` and the kernel knobs it ran with to $SLABSCOPE_GPU_REPORT (a JSON-lines file), if set."""
    from pool.kernels.tuning import DEFAULT_TUNING

    path = os.environ.get("SLABSCOPE_GPU_REPORT")
    if path:
        record = {**record, **(tuning or DEFAULT_TUNING).as_dict()}
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _check(lengths, *, layout, dtype="bfloat16", n_q=16, n_kv=8, head_dim=128, slab_blocks=32, case="",
           design="slab", poison=False, unroll=None, num_splits=None):
    from pool.kernels.paged_decode import fused_decode, gather_decode, plan_for_pool
    from pool.kernels.plan import KernelUnsupported
    from pool.kernels.tuning import DEFAULT_TUNING, KernelTuning
    from pool.kernels.workbench import fill_pool, poison_unused, random_queries

    tuning = DEFAULT_TUNING if unroll is None else KernelTuning(unroll=unroll)

    pool, seq_ids = fill_pool(lengths, n_kv_heads=n_kv, head_dim=head_dim, dtype=dtype, layout=layout,
                              slab_blocks=slab_blocks, seed=len(lengths) * 7 + max(lengths), design=design)
    if poison:  # NaN wherever no sequence can see: any stray read would show in the output
        assert poison_unused(pool) > 0
    queries = random_queries(len(lengths), n_q, head_dim, dtype, seed=max(lengths))
    scale = head_dim ** -0.5
    num_slabs = len(pool.storage.keys[0])
    try:
        plan = plan_for_pool(pool, seq_ids, scale=scale, tuning=tuning, num_splits=num_splits)
        fused = fused_decode(pool, 0, seq_ids, queries, scale=scale, backend=BACKEND, plan=plan)
    except KernelUnsupported as exc:  # e.g. Metal's 12-slab limit: the decision rule falls back to gather
        _report({"case": case, "backend": BACKEND, "layout": layout, "slabs": num_slabs, "skipped": str(exc)},
                tuning)
        pytest.skip(f"{BACKEND} kernel declines: {exc}")
    ref = gather_decode(pool, 0, seq_ids, queries, scale=scale)
    ref32 = gather_decode(pool, 0, seq_ids, queries, scale=scale, upcast=True)
    mx.eval(fused, ref, ref32)
    assert fused.shape == queries.shape and fused.dtype == queries.dtype
    assert not mx.any(mx.isnan(fused)).item()
    err, err32 = _errors(fused, ref), _errors(fused, ref32)
    gather_err32 = _errors(ref, ref32)
    _report({"case": case, "backend": BACKEND, "dtype": dtype, "head_dim": head_dim, "gqa": f"{n_q}/{n_kv}",
             "batch": len(lengths), "max_len": max(lengths), "layout": layout, "slabs": num_slabs,
             "splits": plan.num_splits, "rel_err_vs_gather": err, "rel_err_vs_fp32": err32,
             "gather_rel_err_vs_fp32": gather_err32, "tolerance": TOLERANCE[dtype]}, tuning)
    assert err32 <= TOLERANCE[dtype], f"fused vs float32: {err32:.3g} > {TOLERANCE[dtype]:.3g}"
    assert err <= gather_err32 + TOLERANCE[dtype], f"fused vs gather: {err:.3g} > {gather_err32:.3g} + tolerance"


@pytest.mark.parametrize("layout", ["single", "multi", "fragmented"])
@pytest.mark.parametrize("context", [1024, 4096, 16384])
@pytest.mark.parametrize("batch", [1, 4, 8, 16])
def test_fused_matches_gather_grid(batch, context, layout):
    _check([context] * batch, layout=layout, case="grid")


@pytest.mark.parametrize("unroll", [4, 8])  # the kernel-tuning variants (pool/kernels/tuning.py), each checked
@pytest.mark.parametrize("layout", ["multi", "fragmented"])
def test_fused_fp16_head_dim_64_gqa4(layout, unroll):
    _check([1000, 4096, 77, 2500], layout=layout, dtype="float16", n_q=8, n_kv=2, head_dim=64, case="fp16-d64",
           unroll=unroll)


@pytest.mark.parametrize("unroll", [4, 8])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_fused_ragged_lengths_small_slabs(dtype, unroll):
    """Unequal lengths, partial last blocks, many small slabs (8 blocks each); every invisible position is NaN."""
    _check([1, 31, 33, 1000, 5000, 129], layout="fragmented", dtype=dtype, slab_blocks=8, case="ragged",
           poison=True, unroll=unroll)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_fused_long_chunks(num_splits):
    """Few splits over long contexts (what a larger ``min_chunk_tokens`` gives): each warp reads up to 128 blocks of
    its chunk, and a chunk ends mid-block or one block past a warp's share (4,161 tokens: 131 blocks over 4 warps);
    every invisible position is NaN."""
    _check([16384, 4161, 129, 8000], layout="fragmented", slab_blocks=8, case="long-chunks", poison=True,
           num_splits=num_splits)


def test_many_split_launches_in_one_graph():
    """One prepared launch (``launches``) serving 30 calls that are all built before anything is evaluated, each on
    other queries and with several splits: each equals its own gather + SDPA reference (a launch's partials and
    output are its own; 6446b7a's one-launch design shared arrival counts across such calls)."""
    from pool.kernels.paged_decode import fused_decode, gather_decode, plan_for_pool
    from pool.kernels.workbench import fill_pool, random_queries

    pool, seq_ids = fill_pool([3000, 700, 4096], n_kv_heads=8, head_dim=128, dtype="bfloat16", layout="multi")
    plan, launches = plan_for_pool(pool, seq_ids, scale=128 ** -0.5, num_splits=5), {}
    queries = [random_queries(3, 16, 128, "bfloat16", seed=s) for s in range(30)]
    fused = [fused_decode(pool, 0, seq_ids, q, scale=128 ** -0.5, backend=BACKEND, plan=plan, launches=launches)
             for q in queries]
    refs = [gather_decode(pool, 0, seq_ids, q, scale=128 ** -0.5, upcast=True) for q in queries]
    mx.eval(fused, refs)
    errors = [_errors(f, r) for f, r in zip(fused, refs)]
    assert max(errors) <= TOLERANCE["bfloat16"], errors


def test_fused_reads_the_monolithic_design_too():
    """The monolithic baseline's single grown tensor is one slab of `capacity` rows to the kernel."""
    _check([3000, 700, 4096], layout="multi", case="monolithic", design="monolithic", poison=True)


def test_fused_respects_logical_start():
    """Tokens before a sequence's logical start are invisible to the kernel, like to the gather path."""
    import numpy as np

    from pool.kernels.paged_decode import kernel_for_backend
    from pool.kernels.plan import plan_decode
    from pool.kernels.workbench import fill_pool, random_queries

    pool, seq_ids = fill_pool([2048, 2048], n_kv_heads=8, head_dim=128, dtype="bfloat16", layout="multi")
    queries = random_queries(2, 16, 128, "bfloat16")
    tables = [pool.book.table(s).rows for s in seq_ids]
    starts = [100, 1500]
    plan = plan_decode(tables, [2048, 2048], starts, block_size=32, slab_blocks=32,
                       num_slabs=len(pool.storage.keys[0]), n_kv_heads=8, scale=128 ** -0.5)
    fused = kernel_for_backend(BACKEND)(queries, pool.storage.keys[0], pool.storage.values[0], plan)
    outs = []
    for i, seq_id in enumerate(seq_ids):
        visible = pool.gather_visible(0, seq_id)
        k, v = visible.keys[:, starts[i]:], visible.values[:, starts[i]:]
        outs.append(mx.fast.scaled_dot_product_attention(
            queries[i:i + 1].astype(mx.float32), k[None].astype(mx.float32), v[None].astype(mx.float32),
            scale=128 ** -0.5).astype(mx.bfloat16))
    ref32 = mx.concatenate(outs)
    err = _errors(fused, ref32)
    _report({"case": "logical_start", "backend": BACKEND, "rel_err_vs_fp32": err})
    assert np.isfinite(err) and err <= TOLERANCE["bfloat16"]


@pytest.mark.parametrize("lengths, dtype, n_q, n_kv, head_dim", [
    ([700, 77, 300], "bfloat16", 16, 8, 128),   # several splits: first pass + merge
    ([200, 31], "float16", 8, 2, 64),            # one split: the direct pass
])
def test_the_cpu_emulation_computes_what_the_kernel_computes(lengths, dtype, n_q, n_kv, head_dim):
    """``pool.kernels.paged_decode_emulated`` (the kernel the CPU tests run on the fused route) against the kernel:
    both accumulate in float32 in the same order and round once to ``dtype``, so they differ only where the last
    float32 bits (GPU exp2f, fma contraction) straddle a rounding boundary of ``dtype``: by at most one unit in the
    last place at the output's magnitude (eps(dtype) * max|out|), in under 1% of the elements."""
    import numpy as np

    from pool.kernels.paged_decode import fused_decode, gather_decode, plan_for_pool
    from pool.kernels.paged_decode_emulated import paged_decode_emulated
    from pool.kernels.workbench import fill_pool, random_queries

    pool, ids = fill_pool(lengths, n_kv_heads=n_kv, head_dim=head_dim, dtype=dtype, layout="fragmented",
                          slab_blocks=8)
    queries = random_queries(len(lengths), n_q, head_dim, dtype)
    plan = plan_for_pool(pool, ids, scale=head_dim ** -0.5)
    kernel = fused_decode(pool, 0, ids, queries, scale=head_dim ** -0.5, backend=BACKEND, plan=plan)
    emulated = paged_decode_emulated(queries, pool.storage.keys[0], pool.storage.values[0], plan)
    gathered = gather_decode(pool, 0, ids, queries, scale=head_dim ** -0.5)
    ours, theirs, ref = (np.array(x.astype(mx.float32)) for x in (kernel, emulated, gathered))
    one_ulp = float(mx.finfo(getattr(mx, dtype)).eps) * float(np.abs(ours).max())
    differing = float(np.mean(ours != theirs))
    _report({"case": "emulation", "backend": BACKEND, "dtype": dtype, "splits": plan.num_splits,
             "fraction_differing_from_emulation": differing, "fraction_differing_from_gather": float(np.mean(
                 ours != ref)), "max_diff_from_emulation_in_ulps": float(np.abs(ours - theirs).max() / one_ulp)})
    assert np.abs(ours - theirs).max() <= one_ulp, "the emulation is more than one unit in the last place off"
    assert differing < 0.01


CUDA_ONLY = pytest.mark.skipif(BACKEND != "cuda", reason="the NVRTC-built kernel is the CUDA backend's")


@CUDA_ONLY
@pytest.mark.parametrize("lengths, dtype, n_q, n_kv, head_dim", [
    ([4096, 1000, 77, 2500], "bfloat16", 16, 8, 128),   # several splits: first pass + merge
    ([200, 31], "float16", 8, 2, 64),                   # one split: the direct pass
])
def test_nvrtc_build_equals_mlx_cuda_kernel_build_bit_for_bit(lengths, dtype, n_q, n_kv, head_dim, monkeypatch):
    """Same kernel body, two builds (ours: standalone source, NVRTC, precompiled launch; MLX's cuda_kernel JIT
    with its own headers): the outputs are identical, bit for bit."""
    from pool.kernels.cuda_builds import BUILD_ENV, process_builds
    from pool.kernels.paged_decode import fused_decode, plan_for_pool
    from pool.kernels.workbench import fill_pool, random_queries

    assert process_builds() is not None, "NVRTC not found on the GPU machine"
    pool, ids = fill_pool(lengths, n_kv_heads=n_kv, head_dim=head_dim, dtype=dtype, layout="fragmented",
                          slab_blocks=8)
    queries = random_queries(len(lengths), n_q, head_dim, dtype)
    plan = plan_for_pool(pool, ids, scale=head_dim ** -0.5)
    ours = fused_decode(pool, 0, ids, queries, scale=head_dim ** -0.5, backend="cuda", plan=plan)
    mx.eval(ours)
    monkeypatch.setenv(BUILD_ENV, "mlx")
    theirs = fused_decode(pool, 0, ids, queries, scale=head_dim ** -0.5, backend="cuda", plan=plan)
    mx.eval(theirs)
    assert mx.array_equal(ours, theirs), f"max diff {mx.max(mx.abs(ours.astype(mx.float32) - theirs)).item()}"


@CUDA_ONLY
def test_live_decode_gathers_while_its_kernel_compiles_then_fuses(tmp_path, monkeypatch):
    """A fresh kernel cache and a compiler held until the first decode step asked: that step gathers with the
    reason "kernel for N slabs compiling"; the kernel then builds in the background and later steps are fused."""
    import threading

    import pool.kernels.cuda_builds as cb
    from app.models import load_model
    from app.workloads.fused_attention import KernelRoute
    from app.workloads.runner import run_workload
    from probes.events import FusedChange
    from app.workloads.spec import RunSpec
    from pool.kernels.kernel_cache import KernelCache
    from pool.kernels.nvrtc import load_nvrtc

    nvrtc, gate = load_nvrtc(), threading.Event()

    def held(text, sm):
        assert gate.wait(60)
        return nvrtc.compile(text, sm=sm, options=cb.OPTIONS)

    builds = cb.KernelBuilds(cb.device_sm(), cache=KernelCache(str(tmp_path)), compiler=held, nvrtc=nvrtc)
    ask = builds.pending_reason

    def pending_then_open(geometry, num_slabs):
        reason = ask(geometry, num_slabs)
        gate.set()  # the first question was answered "compiling"; let the builds run from now on
        return reason

    builds.pending_reason = pending_then_open
    monkeypatch.setitem(cb._PROCESS, "builds", builds)  # the launch path uses the same builds
    # the load-time rehearsal would be the first to ask (and open the gate): this is the run's own decline path
    monkeypatch.setenv("SLABSCOPE_REHEARSAL", "0")
    loaded = load_model("synthetic:qwen3-0.6b", dtype="bfloat16", device="gpu")
    spec = RunSpec(scenario="distinct_burst", backend="slab", model=loaded.name, dtype="bfloat16", device="gpu",
                   overrides={"n": 4, "prompt_tokens": 1024, "gen_tokens": 128})
    events: list = []
    summary = run_workload(spec, events.append, loaded=loaded, kernel_route=KernelRoute(builds=builds))
    layer0 = [e for e in events if isinstance(e, FusedChange) and e.layer == 0]
    assert not layer0[0].use_fused and layer0[0].reason.endswith("slabs compiling")
    assert layer0[-1].use_fused, layer0
    assert summary["fused_decode"]["fused"] > 0 and summary["fused_decode"]["build"]["compiled"] >= 3
