"""Rank recordings merged into one run (probes.ranks, probes.rank_clock) and compare's rank view, on synthetic
recordings written through the real recorder: grouping and its errors, clock alignment (shift, interpolation,
loose measurements left out), the imbalance row, step skew, outputs agreement, the --max-imbalance gate."""

from __future__ import annotations

import json

import pytest

from app.cli import main as cli_main
from probes.events import ClockSync, PhaseEdge, Sample, Step
from probes.rank_clock import RankClock
from probes.ranks import (RankMergeError, check_imbalance, group_runs, imbalance_rows, outputs_report, rank_lanes,
                          step_alignment)
from probes.recording import SessionRecorder
from probes.replay import Session
from probes.store import SessionModel

MIB = 2**20


def write_rank(path, *, rank: int, world: int = 2, run_id: str = "run1", backend: str = "slab",
               t_start: float = 1000.0, peak_at: float = 1.0, peak: int = 100 * MIB, clock_events=(),
               start_offset: float = 0.0, start_bound: float = 1e-4, step_times=(), generated=None,
               batch_of=None, close: bool = True) -> str:
    """A rank recording: samples every 0.1 s over 2 s (footprint ``peak`` at ``peak_at``, 10 MiB elsewhere), one
    phase "burst" over [0, 2], decode steps at ``step_times`` (rank-relative; batch 1 unless ``batch_of[step]``),
    ``clock`` events (t, offset, bound)."""
    batch_of = batch_of or {}
    meta = {"backend": backend, "distributed": {
        "run_id": run_id, "rank": rank, "world_size": world, "launch_backend": "ring", "host": f"h{rank}",
        "pid": 100 + rank, "device_memory": {"bytes": 24 * 2**30}, "shard": {"kv_heads": [rank, rank + 1],
                                                                            "n_kv_heads_total": world},
        "clock": {"offset_s": start_offset, "bound_s": start_bound}}}
    rec = SessionRecorder(path, meta, t_start)
    events = [PhaseEdge(name="burst", edge="start", t=t_start)]
    for i in range(21):
        t = i * 0.1
        foot = peak if abs(t - peak_at) < 1e-9 else 10 * MIB
        events.append(Sample(t=t_start + t, step=i, tokens=i, footprint=foot, rss=foot, active=foot, cache=0,
                             peak=foot, footprint_max=foot, rss_max=foot, sys_available=0, weights=0, pool_live=0,
                             pool_free=0, other_active=foot, rss_other=0, cost_us=0.0))
    for step, t in enumerate(step_times, start=1):
        events.append(Step(t=t_start + t, step=step, tokens=step, num_tokens=1, type="decode",
                           batch=batch_of.get(step, 1), phase="burst", wall_s=0.0))
    for t, offset, bound in clock_events:
        events.append(ClockSync(t=t_start + t, reason="step", offset_s=offset, bound_s=bound))
    events.append(PhaseEdge(name="burst", edge="end", t=t_start + 2.0, step=20, tokens=20))
    rec.write(sorted(events, key=lambda e: e.t))
    generated = {"0": [5, 6, 7], "1": [8, 9]} if generated is None else generated
    outputs = {"digest": json.dumps(generated, sort_keys=True), "requests": len(generated),
               "generated_tokens": sum(map(len, generated.values())), "generated": generated}
    if close:
        rec.close({"outputs": outputs}, t=t_start + 2.0)
    else:
        rec.abandon()
    return str(path)


@pytest.fixture
def two_ranks(tmp_path):
    """Rank 1's clock reads 0.2 s behind rank 0's (offset +0.2 s) and it started 0.5 s after rank 0 (its own
    t_start 1000.3): its peak at its own 1.0 s is at 1.5 s on rank 0's clock, after rank 0's peak at 1.0 s."""
    r0 = write_rank(tmp_path / "x-slab-rank0.slabrec", rank=0, peak_at=1.0, peak=100 * MIB,
                    step_times=[0.5, 1.0, 1.5])
    r1 = write_rank(tmp_path / "x-slab-rank1.slabrec", rank=1, t_start=1000.5 - 0.2, peak_at=1.0, peak=150 * MIB,
                    start_offset=0.2, clock_events=[(1.0, 0.2, 1e-4)], step_times=[0.0, 0.504, 1.0])
    return tmp_path, [Session.open(r0), Session.open(r1)]


def test_group_runs_orders_ranks_and_separates_single_process_sessions(two_ranks, tmp_path):
    _, sessions = two_ranks
    plain_path = tmp_path / "plain.slabrec"
    rec = SessionRecorder(plain_path, {"backend": "dense"}, 5.0)
    rec.close({}, t=6.0)
    runs, plain = group_runs([sessions[1], Session.open(plain_path), sessions[0]])
    assert len(runs) == 1 and [p.path for p in plain] == [str(plain_path)]
    run = runs[0]
    assert run.world_size == 2 and run.label == "slab" and run.launch_backend == "ring"
    assert [s.meta["distributed"]["rank"] for s in run.sessions] == [0, 1]


def test_clock_maps_rank_time_onto_rank_zero(two_ranks):
    _, sessions = two_ranks
    run = group_runs(sessions)[0][0]
    assert run.clocks[0].to_reference(1.0) == 1.0
    # rank 1: t_start is 0.3 s after rank 0's on its own clock, which reads 0.2 s behind rank 0's
    assert run.clocks[1].to_reference(1.0) == pytest.approx(1.5)
    assert run.clocks[1].from_reference(1.5) == pytest.approx(1.0)


def test_clock_interpolates_and_leaves_loose_measurements_out():
    fake = SessionModel()
    fake.set_meta({"t_start": 10.0, "distributed": {"clock": {"offset_s": 0.0, "bound_s": 1e-4}}})
    fake.add_event(ClockSync(t=10.0, reason="step", offset_s=0.010, bound_s=1e-4))   # drift: 1 ms/s
    fake.add_event(ClockSync(t=5.0, reason="step", offset_s=0.9, bound_s=0.02))      # busy machine: loose
    clock = RankClock.from_session(fake, reference_t_start=10.0)
    assert clock.measurements == 3 and len(clock.anchors) == 2
    assert clock.offset(5.0) == pytest.approx(0.005) and clock.offset(20.0) == pytest.approx(0.010)
    assert clock.residual_s == pytest.approx(0.010) and clock.bound_s == pytest.approx(1e-4)
    for t in (0.0, 3.0, 7.5, 25.0):
        assert clock.from_reference(clock.to_reference(t)) == pytest.approx(t, abs=1e-12)


def test_imbalance_row_names_ranks_and_first_peak_on_the_aligned_clock(two_ranks):
    _, sessions = two_ranks
    run = group_runs(sessions)[0][0]
    rows = {r.phase: r for r in imbalance_rows(run)}
    assert set(rows) == {"burst", "all"}
    row = rows["burst"]
    assert row.footprints == (100 * MIB, 150 * MIB)
    assert row.imbalance == pytest.approx(1.5) and row.max_rank == 1 and row.min_rank == 0
    # rank 1 peaks at its own 1.0 s, i.e. 1.5 s on rank 0's clock: rank 0 (1.0 s) peaked first
    assert row.first_peak_rank == 0 and row.first_peak_t == pytest.approx(1.0)
    assert row.peak_spread_s == pytest.approx(0.5)
    # steps end within 4 ms of each other once aligned (0 ms, 4 ms, 0 ms)
    assert row.steps_compared == 3 and row.step_skew_max_s == pytest.approx(0.004, abs=1e-9)
    assert row.step_skew_median_s == pytest.approx(0.0, abs=1e-9)
    lanes = rank_lanes(run)
    assert len(lanes) == 2 and max(lanes[1], key=lambda p: p[1])[0] == pytest.approx(1.5)


def test_step_alignment_finds_the_first_step_planned_differently(tmp_path, two_ranks, capsys):
    _, sessions = two_ranks
    assert step_alignment(group_runs(sessions)[0][0]) == (3, None)
    a = Session.open(write_rank(tmp_path / "a.slabrec", rank=0, run_id="q", step_times=[0.1, 0.2, 0.3]))
    b = Session.open(write_rank(tmp_path / "b.slabrec", rank=1, run_id="q", step_times=[0.1, 0.2, 0.3],
                                batch_of={2: 3}))
    steps, mismatch = step_alignment(group_runs([a, b])[0][0])
    assert steps == 3 and mismatch == ("slab: step 2 differs between ranks: rank 0 ('decode', 1, 1), rank 1 "
                                       "('decode', 3, 1) (type, batch, tokens)")
    assert cli_main(["compare", a.path, b.path]) == 1  # ranks out of lockstep always fail compare
    out = capsys.readouterr().out
    assert "NOT in lockstep" in out and "GATE FAILED: slab: step 2 differs" in out


def test_imbalance_gate(two_ranks):
    _, sessions = two_ranks
    rows = imbalance_rows(group_runs(sessions)[0][0])
    assert check_imbalance(rows, 2.0) == [] and check_imbalance(rows, None) == []
    failures = check_imbalance(rows, 1.4)
    assert len(failures) == 2 and "rank imbalance 1.500 > 1.4 (rank 1 vs rank 0)" in failures[0]


@pytest.mark.parametrize("ranks, message", [
    ([0], "rank 1 of 2 is missing (found rank0)"),
    ([0, 0], "rank 1 of 2 is missing (found rank0, rank0)"),
])
def test_incomplete_runs_are_one_line_errors(tmp_path, ranks, message):
    sessions = [Session.open(write_rank(tmp_path / f"r{i}.slabrec", rank=r)) for i, r in enumerate(ranks)]
    with pytest.raises(RankMergeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        group_runs(sessions)


def test_ranks_disagreeing_on_world_size_is_an_error(tmp_path):
    sessions = [Session.open(write_rank(tmp_path / "a.slabrec", rank=0)),
                Session.open(write_rank(tmp_path / "b.slabrec", rank=1, world=3))]
    with pytest.raises(RankMergeError, match="disagree on the world size"):
        group_runs(sessions)


def test_outputs_report_flags_ranks_that_disagree_and_says_where(tmp_path):
    a = Session.open(write_rank(tmp_path / "a.slabrec", rank=0))
    b = Session.open(write_rank(tmp_path / "b.slabrec", rank=1, generated={"0": [5, 6, 4], "1": [8, 9]}))
    c = Session.open(write_rank(tmp_path / "c.slabrec", rank=0, run_id="r2", backend="dense", world=1))
    runs, plain = group_runs([a, b, c])
    lines, failures, same = outputs_report(runs, plain)
    assert failures == ["slab: rank 1 generated other tokens than rank 0 (request 0 token 2: 7 vs 4)"]
    assert same and len(lines) == 2  # rank 0 of slab and the dense run agree
    d = Session.open(write_rank(tmp_path / "d.slabrec", rank=0, run_id="r3", world=1, generated={"0": [5, 6]}))
    lines, _, same = outputs_report(*group_runs([c, d]))
    assert not same and "DIFFERS" in lines[1] and "request 0: 3 vs 2 tokens" in lines[1]


def test_compare_command_merges_ranks_and_gates_on_imbalance(two_ranks, capsys):
    directory, _ = two_ranks
    assert cli_main(["compare", str(directory)]) == 0
    text = capsys.readouterr().out
    assert "run run1: slab, 2 ranks via mlx.launch (ring)" in text
    assert "slab r0" in text and "slab r1" in text and "imbalance across ranks" in text
    assert cli_main(["compare", str(directory), "--max-imbalance", "1.4"]) == 1
    assert "GATE FAILED: slab [burst]: rank imbalance 1.500" in capsys.readouterr().out
    assert cli_main(["compare", str(directory), "--json", "--max-imbalance", "1.6"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"][0]["world_size"] == 2 and data["gate_failures"] == []
    assert {r["phase"]: r["first_peak_rank"] for r in data["imbalance"]} == {"burst": 0, "all": 0}


def test_per_rank_rows_are_compared_with_the_same_rank_of_the_baseline_run(tmp_path, capsys):
    """slab listed first, dense the baseline: slab r1's ratio is against dense r1, not dense r0 or slab r0."""
    for rank, (slab, dense) in enumerate([(40, 20), (90, 30)]):
        write_rank(tmp_path / f"a-slab-rank{rank}.slabrec", rank=rank, run_id="s", peak=slab * MIB)
        write_rank(tmp_path / f"b-dense-rank{rank}.slabrec", rank=rank, run_id="d", backend="dense",
                   peak=dense * MIB)
    assert cli_main(["compare", str(tmp_path), "--json"]) == 0
    rows = {(r["session"], r["phase"]): r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows[("slab r0", "all")]["footprint_ratio"] == pytest.approx(2.0)
    assert rows[("slab r1", "all")]["footprint_ratio"] == pytest.approx(3.0)
    assert rows[("dense r1", "all")]["footprint_ratio"] is None and rows[("dense r1", "all")]["is_baseline"]


def test_compare_with_a_rank_missing_exits_2_with_one_line(tmp_path, capsys):
    write_rank(tmp_path / "x-slab-rank0.slabrec", rank=0)
    assert cli_main(["compare", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "rank 1 of 2 is missing" in err and "\n" not in err


def test_an_incomplete_rank_recording_still_merges(tmp_path, capsys):
    write_rank(tmp_path / "x-slab-rank0.slabrec", rank=0)
    write_rank(tmp_path / "x-slab-rank1.slabrec", rank=1, close=False)
    assert cli_main(["compare", str(tmp_path)]) == 0
    assert "INCOMPLETE (the rank died without closing its recording)" in capsys.readouterr().out


def test_merge_and_launch_side_import_no_mlx():
    """The TUI process and the record parent never import mlx: the merge, the launcher and the checks."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import sys; import probes.ranks, probes.rank_clock, app.commands.compare_ranks, "
            "app.commands.record_ranks, app.workloads.launch, app.models.geometry; "
            "app.models.geometry.declared_geometry('synthetic:qwen3-0.6b'); "
            "assert 'mlx' not in sys.modules and 'mlx.core' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)


def _two_phase_rank(path, rank: int, peaks: dict[str, int]) -> Session:
    """A rank of run "phased" with phases "a" over [0, 1] s and "b" over [1, 2] s, footprint ``peaks[phase]`` at
    the middle of each phase and 10 MiB elsewhere (samples every 0.1 s, the two ranks on one clock)."""
    meta = {"backend": "slab", "distributed": {
        "run_id": "phased", "rank": rank, "world_size": 2, "launch_backend": "ring", "host": f"h{rank}",
        "pid": 100 + rank, "shard": {"kv_heads": [rank, rank + 1], "n_kv_heads_total": 2},
        "clock": {"offset_s": 0.0, "bound_s": 1e-4}}}
    t0 = 1000.0
    rec = SessionRecorder(path, meta, t0)
    events = [PhaseEdge(name="a", edge="start", t=t0), PhaseEdge(name="a", edge="end", t=t0 + 0.95),
              PhaseEdge(name="b", edge="start", t=t0 + 1.05), PhaseEdge(name="b", edge="end", t=t0 + 2.0)]
    for i in range(21):
        t = round(i * 0.1, 6)
        foot = peaks["a"] if t == 0.5 else peaks["b"] if t == 1.5 else 10 * MIB
        events.append(Sample(t=t0 + t, step=i, tokens=i, footprint=foot, rss=foot, active=foot, cache=0, peak=foot,
                             footprint_max=foot, rss_max=foot, sys_available=0, weights=0, pool_live=0, pool_free=0,
                             other_active=foot, rss_other=0, cost_us=0.0))
    rec.write(sorted(events, key=lambda e: e.t))
    rec.close({}, t=t0 + 2.0)
    return Session.open(path)


def test_imbalance_is_computed_per_phase_from_each_phase_peaks(tmp_path):
    """Rank 0 peaks in phase a (200 MiB vs 100), rank 1 in phase b (150 MiB vs 50): each phase's row divides that
    phase's peaks (2.0, rank 0 the larger; 3.0, rank 1), and only "all" divides the whole-run peaks (200 / 150).
    Rows computed from whole-run peaks would say 1.333 for every phase."""
    ranks = [_two_phase_rank(tmp_path / f"p-rank{r}.slabrec", r, peaks)
             for r, peaks in enumerate(({"a": 200 * MIB, "b": 50 * MIB}, {"a": 100 * MIB, "b": 150 * MIB}))]
    rows = {r.phase: r for r in imbalance_rows(group_runs(ranks)[0][0])}
    assert list(rows) == ["a", "b", "all"]
    assert rows["a"].footprints == (200 * MIB, 100 * MIB) and rows["a"].imbalance == 2.0
    assert (rows["a"].max_rank, rows["a"].min_rank, rows["a"].first_peak_t) == (0, 1, pytest.approx(0.5))
    assert rows["b"].footprints == (50 * MIB, 150 * MIB) and rows["b"].imbalance == 3.0
    assert (rows["b"].max_rank, rows["b"].min_rank, rows["b"].first_peak_t) == (1, 0, pytest.approx(1.5))
    assert rows["all"].footprints == (200 * MIB, 150 * MIB) and rows["all"].imbalance == pytest.approx(4 / 3)
    assert check_imbalance(list(rows.values()), 2.5) == ["slab [b]: rank imbalance 3.000 > 2.5 (rank 1 vs rank 0)"]
