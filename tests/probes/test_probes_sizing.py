"""What-if sizing (probes/sizing.py, ``slabscope whatif``): the modelled peak footprint, the memory-fit answers and
the limit flags, against figures computed by hand on a session built here, and on the shipped recordings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from pool import BlockBook, PoolConfig
from probes.events import MetaUpdate, OpBatch, Sample
from probes.replay import Session
from probes.sizing import (buffer_flags, fit_table, footprint_model, pool_problem, pool_timeline,
                           recorded_max_buffer)
from probes.store import SessionModel

REPO = Path(__file__).resolve().parents[2]
SLAB_RECORDINGS = [REPO / "assets" / "recordings" / "sample-churn-slab.slabrec",
                   REPO / "assets" / "recordings" / "gpu" / "distinct_burst-slab.slabrec"]
LAYERS, BLOCK, BPR = 2, 16, 1000          # bytes per row (K+V) in the hand-built session
MIB = 2**20


def _sample(t: float, footprint: int, rss_other: int = 0) -> Sample:
    return Sample(t=t, active=footprint, cache=0, footprint=footprint, peak=footprint, footprint_max=footprint,
                  rss=footprint + rss_other, rss_max=footprint + rss_other, sys_available=0, weights=0, pool_live=0,
                  pool_free=0, other_active=0, rss_other=rss_other, cost_us=0.0)


def _session(memory_model: str = "discrete", rss_other: int = 0) -> SessionModel:
    """Two layers, 4-row slabs: one sequence of 20 blocks (320 tokens) at t=1, a second of 2 blocks at t=2.
    Samples: 10 MB at t=0.5, 50 MB at t=1.5, 40 MB at t=2.5."""
    book = BlockBook(LAYERS, BLOCK, "slab", 4, None)
    ops: list = []
    book.add_op_listener(ops.append)
    book.set_geometry("float16", 1, 8, BPR)
    model = SessionModel("hand")
    geometry = msgspec.to_builtins(PoolConfig(LAYERS, BLOCK, 4, "slab"))
    model.append(MetaUpdate(t=100.0, meta={"t_start": 100.0, "geometry": geometry, "memory_model": memory_model}))
    model.append(OpBatch(t=100.0, ops=list(ops), op_t=[100.0] * len(ops)))
    model.append(_sample(100.5, 10_000_000, rss_other))
    for t, seq, tokens in ((101.0, 0, 20 * BLOCK), (102.0, 1, 2 * BLOCK)):
        ops.clear()
        book.add_sequence(seq)
        book.prepare_write(seq, 0, tokens)
        model.append(OpBatch(t=t, ops=list(ops), op_t=[t] * len(ops)))
        model.append(_sample(t + 0.5, 50_000_000 if seq == 0 else 40_000_000, rss_other))
    return model


def test_timeline_replays_both_geometries_at_every_sample():
    timeline = pool_timeline(_session(), slab_blocks=32)
    # recorded: 4-row slabs: 20 rows -> 20, 22 -> 24; what-if: 32-row slabs -> 32 both times
    assert timeline.recorded_reserved == [0, 20 * LAYERS * BPR, 24 * LAYERS * BPR]
    assert timeline.whatif_reserved == [0, 32 * LAYERS * BPR, 32 * LAYERS * BPR]
    assert timeline.max_context == 20 * BLOCK and timeline.max_batch == 2 and timeline.whatif_peak_capacity == 32


def test_whatif_peak_is_the_measured_footprint_plus_the_replayed_pool_difference():
    model = footprint_model(_session(), pool_timeline(_session(), slab_blocks=32))
    assert model.recorded_peak == 50_000_000  # measured
    assert model.whatif_peak == 50_000_000 + 12 * LAYERS * BPR and model.whatif_peak_t == pytest.approx(1.5)
    assert model.pool_at_peak == 32 * LAYERS * BPR
    # non-pool: max(10 MB - 0, 50 MB - 40 kB, 40 MB - 48 kB)
    assert model.nonpool_peak == 50_000_000 - 20 * LAYERS * BPR
    same = footprint_model(_session(), pool_timeline(_session()))
    assert same.whatif_peak == same.recorded_peak  # the recorded geometry changes nothing


def test_unified_memory_counts_the_rss_outside_mlx():
    session = _session("unified", rss_other=3_000_000)
    model = footprint_model(session, pool_timeline(session))
    assert model.nonpool_peak == 50_000_000 - 20 * LAYERS * BPR + 3_000_000
    assert model.need_peak == 53_000_000
    discrete = footprint_model(_session("discrete", 3_000_000), pool_timeline(_session("discrete", 3_000_000)))
    assert discrete.need_peak == 50_000_000  # device memory: host RSS is not in it


def test_largest_batch_and_context_by_hand():
    session = _session()
    timeline = pool_timeline(session)  # 4-row slabs, 2 layers, 1000 B per row; recorded 2 seqs, 320 tokens
    model = footprint_model(session, timeline)
    room_rows = 1000  # give the pool exactly 1000 rows per layer
    memory = model.nonpool_peak + room_rows * LAYERS * BPR
    (row,) = fit_table(model, timeline, [memory], None)
    # batch of 320-token (20-block) sequences: 50 x 20 = 1000 rows fit, 51 do not
    assert row.largest_batch == 50 and "need" in row.batch_limit
    # 2 sequences: 500 blocks each = 8000 tokens; capacity rounds to 4-row slabs (1000 rows exactly)
    assert row.largest_context == 500 * BLOCK
    assert row.fits and row.headroom == memory - model.need_peak
    (small,) = fit_table(model, timeline, [model.nonpool_peak - 1], None)
    assert not small.fits and small.largest_batch == 0 and "non-pool memory alone" in small.batch_limit


def test_largest_batch_respects_the_largest_buffer():
    session = _session()
    timeline = pool_timeline(session, design="monolithic")  # one tensor per layer: its size is bounded
    huge = 10**12
    # a K tensor of R rows is R x BPR / 2 bytes: a 64,000 B buffer holds 128 rows = 6 sequences of 20 blocks
    assert pool_problem(6, 320, timeline, huge, 64_000) is None
    assert "largest allocation" in pool_problem(7, 320, timeline, huge, 64_000)


def test_limit_flags_use_pool_limits_arithmetic():
    session = _session()
    rows_past = 2**32 // (BLOCK * 1 * 8)  # 16 tokens x 1 head x 8 per row: exactly 2^32 elements, one too many
    assert rows_past == 33_554_432  # literal: a limit moved to 2^31 must fail below (rows_past // 2 would be past it)
    timeline = pool_timeline(session, slab_blocks=rows_past)
    flags = buffer_flags(timeline, timeline.whatif_peak_capacity, None, "at the peak")
    assert len(flags) == 1 and "32-bit index" in flags[0] and "fused kernel declines" in flags[0]
    within = pool_timeline(session, slab_blocks=rows_past - 1)
    assert buffer_flags(within, within.whatif_peak_capacity, None, "at the peak") == []
    flags = buffer_flags(within, 32, 1000, "x")
    assert len(flags) == 1 and "cannot be allocated" in flags[0]


@pytest.mark.parametrize("path", SLAB_RECORDINGS, ids=[p.name for p in SLAB_RECORDINGS])
def test_shipped_recordings_recorded_geometry_reproduces_the_measured_peak(path):
    session = Session.open(path)
    timeline = pool_timeline(session)
    model = footprint_model(session, timeline)
    assert model.whatif_peak == model.recorded_peak == session.peak("footprint").value
    assert timeline.recorded_reserved == timeline.whatif_reserved
    last = session.snapshots[-1]
    assert timeline.recorded_reserved[-1] == last.snapshot.stats.bytes_reserved


def test_recorded_max_buffer_comes_from_the_metadata():
    assert recorded_max_buffer({"device_limits": {"max_buffer_bytes": 123}}) == 123
    assert recorded_max_buffer({"device_limits": {}}) is None and recorded_max_buffer({}) is None


def _whatif(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "whatif", *argv], cwd=REPO, capture_output=True, text=True)


def test_cli_prints_sizing_with_what_is_measured_and_modelled():
    result = _whatif(str(SLAB_RECORDINGS[1]), "--design", "monolithic", "--memory", "8G", "--memory", "512G",
                     "--max-buffer", "4G")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "peak footprint, recorded (measured)" in out and "what-if (model" in out
    assert "not modelled: grow-by-copy" in out
    lines = [line.split() for line in out.splitlines() if line.strip().startswith(("8 GiB", "512 GiB"))]
    assert [cells[:3] for cells in lines] == [["8", "GiB", "yes"], ["512", "GiB", "yes"]]
    assert "exceeds the largest allocation" in out  # the 4 GiB buffer bounds the monolithic batch at 512 GiB
    data = json.loads(_whatif(str(SLAB_RECORDINGS[1]), "--memory", "16G", "--json").stdout)
    sizing = data["sizing"]
    assert sizing["footprint"]["recorded_peak_is"] == "measured" and sizing["footprint"]["whatif_peak_is"] == "model"
    assert sizing["fit"][0]["memory"] == 16 * 2**30 and sizing["fit"][0]["largest_batch"] > 8


def test_cli_flags_a_slab_past_the_index_range():
    result = _whatif(str(SLAB_RECORDINGS[1]), "--slab-blocks", "200000")
    assert result.returncode == 0 and "FLAG at the what-if peak: one slab" in result.stdout


@pytest.mark.parametrize("argv, fragment", [(["--memory", "lots"], "not a size"),
                                            (["--max-buffer=-1G"], "size must be")])
def test_cli_bad_sizes_are_one_line(argv, fragment):
    result = _whatif(str(SLAB_RECORDINGS[0]), *argv)
    assert result.returncode == 2 and fragment in result.stderr and len(result.stderr.splitlines()) == 1
