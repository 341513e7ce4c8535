"""CPU tests of everything around the fused paged-decode kernels: launch plans, kernel-source generation,
registration with the decision registry, threshold derivation, and the kernels' algorithm itself through a NumPy
emulation that reads the plan exactly as the CUDA kernel does (tests/gpu/emulate.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from pool.kernels.plan import (KernelUnsupported, choose_splits, plan_decode, scale_bits, slab_bucket,
                               unsupported_reason)

sys.path.insert(0, os.path.dirname(__file__))
from emulate import emulate  # noqa: E402
from pool_writes import write_kv

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_plan_meta_layout_is_exact():
    plan = plan_decode([[5, 6], [0]], [40, 7], [3, 0], block_size=32, slab_blocks=4, num_slabs=2,
                       n_kv_heads=2, scale=0.125, num_splits=1)
    assert plan.num_splits == 1 and plan.chunk_tokens == 64 and plan.max_blocks == 2
    assert plan.meta.dtype == np.int32
    assert plan.meta.tolist() == [4, 2, 64, scale_bits(0.125), 3, 40, 0, 7, 5, 6, 0, 0]
    assert plan.meta[3:4].view(np.float32)[0] == np.float32(0.125)


def test_choose_splits_fills_gpu_and_respects_min_chunk(monkeypatch):
    from pool.kernels.tuning import DEFAULT_TUNING, KernelTuning

    assert (DEFAULT_TUNING.target_blocks, DEFAULT_TUNING.min_chunk_tokens) == (8192, 1024)
    assert choose_splits(16384, 1, 8, 32) == (16, 1024)      # 1024 splits wanted, chunks >= 1024 tokens
    assert choose_splits(16384, 16, 8, 32) == (16, 1024)
    assert choose_splits(16384, 64, 8, 32) == (16, 1024)     # 8192 / (64 * 8) splits: the target binds
    assert choose_splits(16384, 128, 8, 32) == (8, 2048)
    assert choose_splits(100, 1, 8, 32) == (1, 128)          # shorter than one min chunk: one split
    assert choose_splits(4096, 64, 8, 32, KernelTuning(target_blocks=2048)) == (4, 1024)
    assert choose_splits(16384, 16, 8, 32, KernelTuning(target_blocks=2048)) == (16, 1024)
    assert choose_splits(16384, 1, 8, 32, KernelTuning(min_chunk_tokens=256)) == (64, 256)
    assert choose_splits(16384, 32, 8, 32, KernelTuning(min_chunk_tokens=256)) == (32, 512)
    # the environment variable that used to set the target is read no more (knobs are arguments)
    monkeypatch.setenv("SLABSCOPE_DECODE_TARGET_BLOCKS", "2048")
    assert choose_splits(16384, 128, 8, 32) == (8, 2048)
    splits, chunk = choose_splits(1000, 2, 8, 32)
    assert chunk % 32 == 0 and splits * chunk >= 1000 and (splits - 1) * chunk < 1000


def test_slab_bucket_pads_at_most_a_third_with_few_variants():
    assert [slab_bucket(n) for n in (1, 2, 3, 5, 8, 9, 11, 13, 17, 33, 300)] == [1, 2, 4, 8, 8, 10, 12, 16, 20, 40, 320]
    buckets = {slab_bucket(n) for n in range(1, 513)}
    assert len(buckets) == 4 + 3 * 6  # 1, 2, 4, 8, then three per doubling up to 512
    assert all(n <= slab_bucket(n) and 3 * slab_bucket(n) <= max(24, 4 * n) for n in range(1, 513))


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(dtype="float32"), "dtype float32"),
    (dict(head_dim=96), "head_dim 96"),
    (dict(n_q_heads=12, n_kv_heads=8), "not a multiple"),
    (dict(n_q_heads=80, n_kv_heads=8), "GQA group 10"),
    (dict(block_size=3), "block_size 3"),
    (dict(num_slabs=513), "513 slabs"),
    (dict(slab_elements=2**32), "exceeds the fused kernel's index range: 4,294,967,296 elements"),
])
def test_unsupported_reasons_name_the_problem(kwargs, fragment):
    base = dict(dtype="bfloat16", head_dim=128, n_q_heads=16, n_kv_heads=8, block_size=32, num_slabs=4,
                max_slabs=512)
    assert unsupported_reason(**base) is None
    assert unsupported_reason(**base, slab_elements=2**32 - 1) is None
    assert fragment in unsupported_reason(**{**base, **kwargs})


@pytest.mark.parametrize("tables, ends, starts, fragment", [
    ([[0]], [33], None, "cannot cover"),
    ([[0, 99]], [40], None, "outside"),
    ([[0]], [5], [5], "empty"),
    ([], [], None, "non-empty"),
])
def test_plan_rejects_bad_tables(tables, ends, starts, fragment):
    with pytest.raises(KernelUnsupported, match=fragment):
        plan_decode(tables, ends, starts, block_size=32, slab_blocks=4, num_slabs=2, n_kv_heads=1, scale=1.0)


def test_plan_refuses_rows_past_int32():
    """meta is int32: a pool whose slabs hold 2^31 rows or more would wrap a row number silently."""
    plan_decode([[0]], [32], None, block_size=32, slab_blocks=2**30, num_slabs=2, n_kv_heads=1, scale=1.0)
    with pytest.raises(KernelUnsupported, match="int32"):
        plan_decode([[0]], [32], None, block_size=32, slab_blocks=2**30, num_slabs=3, n_kv_heads=1, scale=1.0)


class _Shaped:
    """Stands in for an mx.array at the kernels' entry (shape, dtype, size): nothing that large is allocated."""

    def __init__(self, shape, dtype="bfloat16"):
        self.shape, self.dtype, self.ndim = shape, dtype, len(shape)
        self.size = int(np.prod(shape, dtype=object))

    def reshape(self, *shape):
        raise AssertionError("the kernel entry went past its checks")


@pytest.mark.parametrize("backend", ["cuda", "metal"])
@pytest.mark.parametrize("rows, declined", [(131071, False), (131072, True)])
def test_kernel_entry_refuses_a_slab_past_the_index_range(backend, rows, declined, monkeypatch):
    """One [rows, 8, 32, 128] slab (head-major rows): 131072 rows are 2^32 elements exactly (one past the range:
    declined), 131071 rows fit. The entry raises KernelUnsupported before it touches any array (both kernels share
    the check)."""
    pytest.importorskip("mlx.core")
    from pool.kernels import paged_decode_cuda
    from pool.kernels.paged_decode import kernel_for_backend

    def launched(*args, **kwargs):  # CUDA's launch takes the arrays as they are: stop it where Metal reshapes
        raise AssertionError("the kernel entry went past its checks")

    monkeypatch.setattr(paged_decode_cuda.CudaLaunch, "__call__", launched)

    slab = _Shaped((rows, 8, 32, 128))
    plan = plan_decode([[rows - 1]], [32], None, block_size=32, slab_blocks=rows, num_slabs=1, n_kv_heads=8,
                       scale=1.0)
    kernel = kernel_for_backend(backend)
    if declined:
        with pytest.raises(KernelUnsupported, match="index range"):
            kernel(_Shaped((1, 16, 1, 128)), [slab], [slab], plan)
    else:
        with pytest.raises(AssertionError, match="past its checks"):
            kernel(_Shaped((1, 16, 1, 128)), [slab], [slab], plan)


def _emulated_vs_gather(lengths, layout, *, n_q=4, n_kv=2, head_dim=64, block_size=16, slab_blocks=4,
                        num_splits=None):
    import mlx.core as mx

    from pool.kernels.paged_decode import gather_decode, plan_for_pool
    from pool.kernels.workbench import fill_pool, random_queries

    pool, ids = fill_pool(lengths, n_kv_heads=n_kv, head_dim=head_dim, dtype="float32", layout=layout,
                          block_size=block_size, slab_blocks=slab_blocks, seed=3)
    queries = random_queries(len(lengths), n_q, head_dim, "float32")
    scale = head_dim ** -0.5
    plan = plan_for_pool(pool, ids, scale=scale, num_splits=num_splits)
    ref = np.array(gather_decode(pool, 0, ids, queries, scale=scale))[:, :, 0]
    slabs_k = [np.array(s, dtype=np.float64) for s in pool.storage.keys[0]]
    slabs_v = [np.array(s, dtype=np.float64) for s in pool.storage.values[0]]
    out = emulate(np.array(queries, dtype=np.float64)[:, :, 0], slabs_k, slabs_v, plan)
    assert mx.array(out).shape == ref.shape
    return float(np.abs(out - ref).max()), plan


@pytest.mark.parametrize("layout", ["single", "multi", "fragmented"])
@pytest.mark.parametrize("num_splits", [None, 1, 3])
def test_kernel_algorithm_matches_gather_path(layout, num_splits):
    err, plan = _emulated_vs_gather([100, 300, 64, 257], layout, num_splits=num_splits)
    assert err < 1e-5
    if layout != "single":
        assert plan.num_slabs > 1


def test_kernel_algorithm_gqa_group_8_head_dim_128():
    err, _ = _emulated_vs_gather([70, 33], "fragmented", n_q=16, n_kv=2, head_dim=128, block_size=8)
    assert err < 1e-5


def test_kernel_algorithm_skips_tokens_before_logical_start():
    from pool.kernels.workbench import fill_pool

    pool, ids = fill_pool([90], n_kv_heads=1, head_dim=64, dtype="float32", layout="multi", block_size=16,
                          slab_blocks=2)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 64))
    k = [np.array(s, dtype=np.float64) for s in pool.storage.keys[0]]
    v = [np.array(s, dtype=np.float64) for s in pool.storage.values[0]]
    plan = plan_decode([pool.book.table(0).rows], [90], [37], block_size=16, slab_blocks=2,
                       num_slabs=len(k), n_kv_heads=1, scale=0.125, num_splits=2)
    flat_k = np.concatenate([s.reshape(-1, 1, 64) for s in k])
    flat_v = np.concatenate([s.reshape(-1, 1, 64) for s in v])
    rows = pool.book.table(0).rows
    token_k = np.concatenate([flat_k[r * 16:(r + 1) * 16] for r in rows])[37:90, 0]
    token_v = np.concatenate([flat_v[r * 16:(r + 1) * 16] for r in rows])[37:90, 0]
    w = np.exp(token_k @ q[0, 0] * 0.125 - (token_k @ q[0, 0] * 0.125).max())
    expected = (w / w.sum()) @ token_v
    assert np.abs(emulate(q, k, v, plan, step=4)[0, 0] - expected).max() < 1e-9


def test_cuda_source_generation():
    from pool.kernels import paged_decode_cuda as cu
    from pool.kernels.kernel_build import slab_input_names
    from pool.kernels.tuning import DEFAULT_TUNING

    setup = cu.slab_setup_source(300)
    for s in range(300):
        assert setup.count(f"k_ptrs[{s}] = k{s};") == 1 and setup.count(f"v_ptrs[{s}] = v{s};") == 1
    for direct in (True, False):
        source = cu.pass1_source(8, direct)
        assert "{" + "slab_setup}" not in source and "{" + "epilogue}" not in source
        assert ("out + head" in source) == direct and ("part_ml[2 * slot]" in source) == (not direct)
    assert cu.unroll_for(32, 128) == DEFAULT_TUNING.unroll == 8
    assert cu.unroll_for(4, 128) == 2 and cu.unroll_for(8, 64) == 2
    assert cu.unroll_for(32, 128, 4) == 4 and cu.unroll_for(8, 64, 16) == 2  # fitted to the block: 4 tokens a step
    assert slab_input_names(2) == ["k0", "k1", "v0", "v1"]


def test_metal_source_generation_and_buffer_cap():
    from pool.kernels import paged_decode_metal as metal

    assert [metal.metal_slab_bucket(n) for n in (1, 3, 8, 9, 12)] == [1, 4, 8, 12, 12]
    select = metal.slab_select_source(12)
    assert all(f"case {s}: kb = k{s}; vb = v{s};" in select for s in range(1, 12))
    assert metal.slab_select_source(1) == ""
    assert "{" + "epilogue}" not in metal.pass1_source(4, False)


def test_registration_follows_measurements_and_opt_in():
    import pool.kernels as kernels
    from pool.fused_decision import decide, registered_kernel

    try:
        assert kernels.register_kernels(environ={}, thresholds={}) == []
        assert registered_kernel("cuda") is None
        measured = {"cuda": {"fused_wins": True, "min_batch": 4, "min_context": 2048}}
        assert kernels.register_kernels(environ={}, thresholds=measured) == ["cuda"]
        caps = registered_kernel("cuda")
        assert caps.multi_slab and caps.min_batch == 4 and caps.min_context == 2048
        assert decide(num_slabs=9, dtype="bfloat16", head_dim=128, batch_size=8, context_len=4096,
                      backend="cuda", environ={}).use_fused
        slow = decide(num_slabs=9, dtype="bfloat16", head_dim=128, batch_size=2, context_len=4096,
                      backend="cuda", environ={})
        assert not slow.use_fused and "batch 2" in slow.reason
        off = decide(num_slabs=9, dtype="bfloat16", head_dim=128, batch_size=8, context_len=4096,
                     backend="cuda", environ={"SLABSCOPE_PAGED_ATTENTION_NATIVE": "0"})
        assert not off.use_fused and "SLABSCOPE_PAGED_ATTENTION_NATIVE=0" in off.reason
        assert kernels.register_kernels(environ={}, thresholds={"cuda": {"fused_wins": False}}) == []
        assert kernels.register_kernels(environ={"SLABSCOPE_METAL_KERNEL": "1"}, thresholds={}) == ["metal"]
    finally:
        kernels.register_kernels()


def test_derive_thresholds_picks_largest_all_win_rectangle():
    from app.commands.bench_decode import derive_thresholds

    def row(b, c, win):
        return {"batch": b, "context": c, "fused_us": 1.0 if win else 3.0, "gather_us": 2.0}

    rows = [row(b, c, b >= 4 or c >= 16384) for b in (1, 4, 16) for c in (512, 4096, 16384)]
    assert derive_thresholds(rows)["min_batch"] == 4 and derive_thresholds(rows)["min_context"] == 0
    everywhere = derive_thresholds([row(b, c, True) for b in (1, 4) for c in (512, 4096)])
    assert (everywhere["min_batch"], everywhere["min_context"]) == (1, 0)
    assert derive_thresholds([row(1, 512, False)])["fused_wins"] is False


def test_kernel_modules_and_bench_import_without_mlx():
    code = ("import sys, pool.kernels, pool.kernels.paged_decode_cuda, pool.kernels.paged_decode_metal, "
            "pool.kernels.paged_decode, app.commands.bench_decode; "
            "assert 'mlx.core' not in sys.modules, 'mlx imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_bench_decode_refuses_cpu_with_reason(capsys):
    import argparse

    import mlx.core as mx

    from app.commands import bench_decode

    if mx.default_device().type == mx.DeviceType.gpu:
        pytest.skip("this machine has a GPU backend")
    parser = argparse.ArgumentParser()
    bench_decode.add_arguments(parser)
    assert bench_decode.main(parser.parse_args([])) == 2
    assert "needs a GPU backend" in capsys.readouterr().err


def test_bench_decode_flags_are_the_kernel_tuning_and_bad_ones_fail_first(capsys):
    """``--unroll/--target-blocks/--min-chunk-tokens`` become the run's ``KernelTuning`` (defaults for the rest); a
    value no kernel runs is a one-line usage error before the GPU check or any measurement."""
    import argparse

    from app.cli import main
    from app.commands import bench_decode
    from pool.kernels.tuning import DEFAULT_TUNING, KernelTuning

    parser = argparse.ArgumentParser()
    bench_decode.add_arguments(parser)
    assert bench_decode.kernel_tuning(parser.parse_args([])) == DEFAULT_TUNING
    assert bench_decode.kernel_tuning(parser.parse_args(["--unroll", "4", "--target-blocks", "2048"])) == \
        KernelTuning(unroll=4, target_blocks=2048, min_chunk_tokens=DEFAULT_TUNING.min_chunk_tokens)
    assert KernelTuning(unroll=4).as_dict() == {"unroll": 4, "target_blocks": 8192, "min_chunk_tokens": 1024}
    for argv, said in ((["--unroll", "3"], "unroll 3 is not one of"), (["--min-chunk-tokens", "0"],
                                                                         "min_chunk_tokens must be at least 1")):
        assert main(["bench", "decode", *argv]) == 2
        err = capsys.readouterr().err
        assert said in err and "GPU" not in err and len(err.strip().splitlines()) == 1


def test_result_tools_render_and_pick(tmp_path):
    """The kernel-tuning lab's helpers (lab/kernel_tuning): variant pick (geometric mean over B >= 4) and the docs'
    table rendering."""
    import json

    from lab.kernel_tuning import pick_variant, render_tables

    def run(unroll, fused_scale):
        rows = [{"batch": b, "context": c, "slabs": 1, "splits": 1, "gather_us": 100.0, "sdpa_us": 50.0,
                 "fused_us": fused_scale * c / 1024, "gbps_fused": 1.0} for b in (1, 4) for c in (1024, 4096)]
        return {"kernel": {"unroll": unroll, "target_blocks": 2048, "min_chunk_tokens": 256}, "rows": rows,
                "device": {"device_name": "test"}, "mlx": "0", "geometry": {}, "thresholds": {"fused_wins": True}}

    for unroll, scale in ((4, 2.0), (8, 1.0)):
        (tmp_path / f"u{unroll}.json").write_text(json.dumps(run(unroll, scale)))
    assert pick_variant.score(run(8, 1.0)["rows"]) == pytest.approx(2.0)
    (tmp_path / "bench_decode.json").write_text(json.dumps(run(8, 1.0)))
    (tmp_path / "correctness.jsonl").write_text(json.dumps(
        {"case": "grid", "dtype": "bfloat16", "layout": "multi", "rel_err_vs_gather": 1e-3,
         "rel_err_vs_fp32": 2e-3, "gather_rel_err_vs_fp32": 3e-3, "unroll": "8"}) + "\n")
    tables = render_tables.render(str(tmp_path))
    assert "| 4 | 4096 | 1 | 1 | 100.0 | 4.0 | 50.0 | 25.00x | 0.08 | 1 |" in tables["microbench"]
    assert "2.00e-03" in tables["correctness"]
    doc = tmp_path / "doc.md"
    doc.write_text("a\n<!-- BEGIN:microbench -->\nold\n<!-- END:microbench -->\nb\n")
    assert render_tables.update(str(doc), tables) == ["microbench"]
    assert "\nold\n" not in doc.read_text() and "25.00x" in doc.read_text()


def test_kernel_algorithm_ignores_poisoned_invisible_positions():
    """NaN in every position no sequence can see (free rows, partial-block tails) leaves the result finite and
    equal to the gather path's."""
    import mlx.core as mx

    from pool.kernels.paged_decode import gather_decode, plan_for_pool
    from pool.kernels.workbench import fill_pool, poison_unused, random_queries

    pool, ids = fill_pool([45, 3, 70], n_kv_heads=2, head_dim=64, dtype="float32", layout="fragmented",
                          block_size=16, slab_blocks=4, design="slab")
    pool.add_sequence(99)
    pool.prepare_write(99, 0, 40)
    write_kv(pool, 0, 99, 0, mx.zeros((40, 2, 64)), mx.zeros((40, 2, 64)))
    pool.release(99)  # its rows are now free: poisoned below
    assert poison_unused(pool) >= 40 + (48 - 45) + (16 - 3) + (80 - 70)
    queries = random_queries(3, 4, 64, "float32")
    plan = plan_for_pool(pool, ids, scale=0.125, num_splits=2)
    ref = np.array(gather_decode(pool, 0, ids, queries, scale=0.125))[:, :, 0]
    k = [np.array(s, dtype=np.float64) for s in pool.storage.keys[0]]
    v = [np.array(s, dtype=np.float64) for s in pool.storage.values[0]]
    out = emulate(np.array(queries, dtype=np.float64)[:, :, 0], k, v, plan)
    assert np.isfinite(ref).all() and np.isfinite(out).all()
    assert np.abs(out - ref).max() < 1e-5


def test_bench_decode_table_shows_both_bandwidths_and_the_route():
    import io

    from app.commands.bench_decode import print_table

    row = {"batch": 16, "context": 16384, "slabs": 260, "gather_us": 5000.0, "fused_us": 700.0, "sdpa_us": 350.0,
           "gbps_fused": 1530.0, "gbps_sdpa": 3060.0, "route": "slab table"}
    out = io.StringIO()
    print_table([row], out)
    header, line = out.getvalue().splitlines()
    assert header.split()[-3:] == ["GB/s", "sdpa", "route"]
    assert line.split()[-4:] == ["1530", "3060", "slab", "table"] and " 2.00 " in line
