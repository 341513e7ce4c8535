"""Which number is right, for each figure issue 27 found printed differently (``probes/figures.py``).

Each test pins the figure a definition gives on a shipped recording to an independent source (the run's own END
summary, the recorded per-step events, a replay of the op log) and checks the surface that printed another number
at 5241d86 (the value it printed is in each docstring)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main as cli_main
from pool.fused_decision import KernelCaps, decide
from probes import figures
from probes.digest import digest
from probes.events import GatherRuns
from probes.replay import Session
from probes.whatif import mismatches_with_recording, run_whatif

ROOT = Path(__file__).resolve().parents[2] / "assets" / "recordings"
SLAB, DENSE = ROOT / "gpu" / "distinct_burst-slab.slabrec", ROOT / "gpu" / "distinct_burst-dense.slabrec"
CHURN = ROOT / "sample-churn-slab.slabrec"


@pytest.fixture(scope="module")
def burst():
    return Session.open(SLAB)


def _compare_json(paths, capsys) -> dict:
    assert cli_main(["compare", *map(str, paths), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    return {(r["session"], r["phase"]): r for r in data["rows"]}


def test_gather_runs_are_the_decode_steps_runs(burst, capsys):
    """compare printed 2.50/4 (the pool's histogram: prefill reads only, decode ran fused), whatif and the export
    5.00/5 (live sequences at 0.5 Hz snapshots). The decode steps walked 5 runs for 31 of 32 steps' sequences: the
    recorded GatherRuns say 4.97/5, and a replay of the op log finds the same steps with the same runs."""
    runs = figures.gather_runs(burst)
    recorded = [r for e in burst.events_of(GatherRuns) for r in e.runs_max]
    assert (runs.source, runs.pairs, round(runs.mean, 5), runs.max) == ("measured", 256, 4.96875, 5)
    assert runs.mean == sum(recorded) / len(recorded) and runs.max == max(recorded)
    replay = run_whatif(burst)
    assert replay.summary()["mean_gather_runs"] == runs.mean and replay.summary()["max_gather_runs"] == 5
    assert mismatches_with_recording(burst, replay) == []
    row = _compare_json([SLAB, DENSE], capsys)[("slab", "all")]
    assert (row["mean_runs"], row["max_runs"]) == (runs.mean, 5)


def test_gather_view_worst_is_the_histograms_largest_bar(burst):
    """The Gather view said "worst: 5" above a histogram that stopped at 4 (two sources)."""
    from app.tui.views.gather import gather_picture

    picture = gather_picture(burst, burst.duration, None)
    assert picture.peak[2] == picture.runs.max == max(picture.runs.hist) == 5
    assert "up to here 4.97/5" in picture.text.plain and "worst: 5 runs" in picture.text.plain


def test_a_recording_without_step_events_takes_its_gather_runs_from_the_op_log():
    """The v1 churn recording has no GatherRuns events: its decode steps are found in the op log (one-token writes
    of every running sequence in a row) and measured there; compare printed 3.09/4 from the gather histogram."""
    churn = Session.open(CHURN)
    runs = figures.gather_runs(churn)
    assert runs.source == "op log" and (round(runs.mean, 4), runs.max) == (3.124, 4)
    assert len(run_whatif(churn).decode_steps) == 37  # the recording's 37 decode steps, each found once


def test_tok_s_is_busy_tok_s_as_the_run_summary_counts_it(burst, capsys):
    """compare divided the tokens by the phase's wall time (13,114.8), the TUI counted decode only (465.1), the
    metrics a 5 s window. The run's own summary (its END record) says tok/s busy 13,386.0: all tokens over the
    steps' time; compare, the TUI and the metrics print that, and name decode tok/s as such."""
    from app.tui.data import SessionSet, ViewState
    from app.tui.views.memory_header import verdict_line

    assert figures.format_tok_s(figures.tok_s(burst)) == f"{burst.summary.summary['tok_s']:,.1f}" == "13,386.0"
    assert round(figures.tok_s(burst, "decode"), 1) == burst.summary.summary["decode_tok_s"] == 465.1
    row = _compare_json([SLAB, DENSE], capsys)[("slab", "all")]
    assert round(row["tokens_per_s"], 1) == 13386.0 and round(row["decode_tokens_per_s"], 1) == 465.1
    sessions = SessionSet()
    burst.label = "slab"
    sessions.add(burst)
    assert "busy tok/s slab 13,386.0" in verdict_line(ViewState(sessions, cursor=None)).plain
    with pytest.raises(ValueError, match="kind must be one of"):
        figures.tok_s(burst, "wall")


def test_declines_count_decode_step_decisions():
    """The rank-0 NCCL recording declined 112 of 896 layer decisions while its kernels compiled: the count per
    decode step and layer, the same as the pool's own counters at the end, by reason class."""
    rank0 = Session.open(ROOT / "gpu" / "nccl2" / "distinct_burst-slab-rank0.slabrec")
    found = figures.declines(rank0)
    counters = rank0.snapshots[-1].snapshot.counters
    assert (found.gather, found.decisions) == (counters.gather_decisions, counters.fused_decisions
                                               + counters.gather_decisions) == (112, 896)
    assert found.by_class == {"gather: compiling": 112}
    assert sum(step.gather for step in figures.decision_steps(rank0)) == 112


def test_the_declines_lane_marks_only_steps_that_declined():
    """The lane marked every snapshot where a layer was not fused (on the CPU: every one, "no GPU kernel backend")
    while compare said no decline; now it marks the decode steps whose decisions gathered, and nothing for a run
    that made no decision."""
    from app.tui.views.fused import decision_lanes, fused_summary

    churn = Session.open(CHURN)
    assert figures.declines(churn) is None and decision_lanes(churn, None)["declines"] == []
    header = fused_summary(churn, {0: (False, "no GPU kernel backend (cpu)")}, None).plain
    assert "declines: - (no fused-kernel decision up to here)" in header and "0 decisions" not in header
    rank0 = Session.open(ROOT / "gpu" / "nccl2" / "distinct_burst-slab-rank0.slabrec")
    steps = figures.decision_steps(rank0)
    assert len(decision_lanes(rank0, None)["declines"]) == sum(1 for s in steps if s.gather) == 4


def test_the_fused_header_counts_what_the_lane_and_compare_count(burst):
    """The Fused header said "fused 0, gather 0 decisions" (the snapshot counters at the cursor) above 30 layers in
    gather: the header now says the layers' state "now" and the declines figure up to the cursor."""
    from app.tui.views.fused import decisions_at, fused_summary

    text = fused_summary(burst, decisions_at(burst, burst.snapshot_at(None), None), None).plain
    assert "now: layers fused 28, gather 0" in text and "declines 0/896 decode-step layer decisions" in text


def test_slab_count_comes_from_the_100hz_samples(burst):
    """The report's slab plot read 0 until the first 0.5 Hz snapshot (2.09 s) though the samples held 924 slabs
    from 0.09 s on. Slabs are the tensors held over all layers: the samples' count, snapshots only where samples
    lack it (v1)."""
    d = digest(burst, series=True)
    ts, slabs, _design = d.slabs
    first_snapshot_with_slabs = next(r.t for r in burst.snapshots if r.snapshot.layers and
                                     r.snapshot.layers[0].num_chunks)
    assert any(t < first_snapshot_with_slabs and n == 924 for t, n in zip(ts, slabs))
    assert figures.slab_count(burst) == 924 == 33 * burst.geometry.num_layers
    assert figures.slab_count(burst, None, 0.05) < 924  # layers get their storage during the first prefill
    churn = Session.open(CHURN)
    assert figures.slab_count(churn) == 10 * 30  # v1: from the snapshots (10 slabs in each of 30 layers)


def test_max_ratio_gates_the_sessions_not_the_baseline(capsys):
    """`compare --max-ratio 0.6` failed with "dense: footprint ratio 1.000 > 0.6": the baseline against itself."""
    assert cli_main(["compare", str(SLAB), str(DENSE), "--max-ratio", "0.6"]) == 0
    out = capsys.readouterr().out
    assert "GATE FAILED" not in out and "base" in out
    assert cli_main(["compare", str(SLAB), str(DENSE), "--max-ratio", "0.5"]) == 1
    assert capsys.readouterr().out.count("GATE FAILED") == 2  # slab's burst and all rows, never dense's


def test_compare_names_every_column_by_its_figure(capsys):
    """Two columns were both headed "x base"."""
    from probes.compare import COLUMNS

    headers = [c.header for c in COLUMNS]
    assert len(set(headers)) == len(headers)
    assert {"footprint vs base", "busy tok/s vs base"} <= set(headers)


@pytest.mark.parametrize("caps_kw, ask, expected", [
    ({}, dict(batch_size=1), "gather: below threshold"),
    ({}, dict(context_len=10), "gather: below threshold"),
    ({"max_batch": 2}, dict(batch_size=4), "gather: outgrown"),
    ({"multi_slab": False}, dict(num_slabs=3), "gather: outgrown"),
    ({"max_buffer_elements": 10}, dict(buffer_elements=100), "gather: outgrown"),
    ({}, dict(dtype="int8"), "gather: unsupported"),
    ({}, dict(head_dim=7), "gather: unsupported"),
    ({}, dict(readiness=lambda n: f"kernel for {n} slabs compiling"), "gather: compiling"),
    ({}, dict(readiness=lambda n: f"kernel for {n} slabs failed to build: nvrtc"), "gather: build failed"),
    ({}, dict(environ={"SLABSCOPE_PAGED_ATTENTION_NATIVE": "0"}), "gather: disabled"),
    ({}, dict(backend="cpu"), "gather: no kernel"),
    ({}, {}, "fused"),
])
def test_every_decision_reason_has_a_class_without_numbers(caps_kw, ask, expected):
    """The metrics' ``reason`` label is the class: one series per class, not per slab count or context."""
    caps = KernelCaps(**{"backend": "cuda", "dtypes": frozenset({"bfloat16"}), "head_dims": frozenset({128}),
                         "multi_slab": True, "min_batch": 2, "min_context": 100, **caps_kw})
    args = dict(num_slabs=33, dtype="bfloat16", head_dim=128, batch_size=8, context_len=4096, backend="cuda",
                caps=caps, environ={})
    decision = decide(**{**args, **ask})
    assert figures.reason_class(decision.reason) == expected, decision.reason
    assert not any(ch.isdigit() for ch in figures.reason_class(decision.reason))


def test_the_pools_own_reasons_have_their_classes():
    from pool.fused_decision import REASON_NO_KERNEL

    assert figures.reason_class(REASON_NO_KERNEL) == "gather: no kernel"
    assert figures.reason_class("layer not written yet") == "gather: layer not written"  # pool/pool.py
    assert figures.reason_class("something new") == figures.OTHER_REASON


def test_a_one_token_prefill_chunk_is_not_a_decode_step():
    """A prompt whose last prefill chunk is one token writes one token, like a decode step of that sequence alone;
    the Step recorded after it (a one-token prefill) tells the op-log replay it is not a decode step."""
    from pool.ops import AddSequence, PrepareWrite, ShrinkTick
    from probes.events import MetaUpdate, OpBatch, Step
    from probes.store import SessionModel

    model = SessionModel(label="slab")
    model.append(MetaUpdate(t=100.0, meta={"t_start": 100.0, "backend": "slab", "geometry": {
        "num_layers": 1, "block_size": 2, "slab_blocks": 2, "design": "slab"}}))
    ops = [(0.1, AddSequence(seq=0)), (0.1, PrepareWrite(seq=0, start=0, num_tokens=4)), (0.2, ShrinkTick()),
           (0.3, PrepareWrite(seq=0, start=4, num_tokens=1)), (0.4, ShrinkTick()),        # a one-token prefill chunk
           (0.5, PrepareWrite(seq=0, start=5, num_tokens=1)), (0.6, ShrinkTick()),        # decode: 3 blocks, 2 runs
           (0.7, PrepareWrite(seq=0, start=6, num_tokens=1)), (0.8, ShrinkTick())]        # decode: 4 blocks, 2 runs
    model.append(OpBatch(t=100.1, ops=[op for _, op in ops], op_t=[100.0 + t for t, _ in ops]))
    for t, kind, tokens in ((0.15, "prefill", 4), (0.35, "prefill", 1), (0.55, "decode", 1), (0.75, "decode", 1)):
        model.append(Step(t=100.0 + t, phase="p", type=kind, batch=1, num_tokens=tokens, wall_s=0.01))
    steps = run_whatif(model).decode_steps
    assert [(round(s.t, 6), s.seqs, s.runs) for s in steps] == [(0.5, [0], [2]), (0.7, [0], [2])]
