"""What-if replay: the recorded geometry reproduces the recording exactly; other geometries change the figures."""

from __future__ import annotations

import pytest

from pool import ShrinkPolicy
from probes.errors import ReplayError
from probes.replay import Session
from probes.whatif import mismatches_with_recording, recorded_config, run_whatif
from probes_helpers import write_synthetic
from probes_scripted import record_scripted


@pytest.fixture(scope="module", params=["slab", "monolithic"])
def session(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("wi") / f"{request.param}.slabrec"
    record_scripted(path, design=request.param, steps=80, seed=3)
    return Session.open(path)


def test_recorded_config_replay_equals_recorded_counters(session):
    result = run_whatif(session)
    assert result.config == recorded_config(session)
    assert result.skipped == []
    assert mismatches_with_recording(session, result) == []
    final = session.snapshots[-1].snapshot
    summary = result.summary()
    assert summary["final_bytes_reserved"] == final.stats.bytes_reserved
    assert summary["slab_appends"] == final.counters.slab_appends
    assert summary["bytes_copied_model"] == final.counters.bytes_copied_model
    # the recording's own figure is measured from the allocator, and agrees with the model it is recorded beside
    assert final.counters.bytes_copied == final.counters.bytes_copied_model


def test_a_recording_with_open_blocks_high_replays_as_it_ran(tmp_path):
    """The geometry names the open-block policy and the replay allocates by it: its counters match the recording,
    whose rows differ from the same script's under "low" (rows minted free below open blocks)."""
    minted = {}
    for policy in ("low", "high"):
        path = tmp_path / f"{policy}.slabrec"
        record_scripted(path, design="slab", steps=80, seed=3, open_blocks=policy)
        view = Session.open(path)
        assert view.geometry.open_blocks == policy and recorded_config(view).open_blocks == policy
        result = run_whatif(view)
        assert result.skipped == [] and mismatches_with_recording(view, result) == []
        minted[policy] = view.snapshots[-1].snapshot.counters.rows_minted
    assert minted["high"] > minted["low"]


def test_bigger_slabs_mean_fewer_slabs_and_fewer_runs(session):
    small = run_whatif(session).summary()
    if session.geometry.design == "monolithic":  # grows in fixed 32-row chunks: slab size is irrelevant
        assert run_whatif(session, slab_blocks=64).summary() == dict(small, config=dict(small["config"],
                                                                                         slab_blocks=64))
        return
    big = run_whatif(session, slab_blocks=64).summary()
    assert big["max_slabs_per_layer"] < small["max_slabs_per_layer"]
    assert big["mean_gather_runs"] < small["mean_gather_runs"]
    assert big["final_bytes_reserved"] >= small["final_bytes_reserved"]  # coarser granularity reserves more
    assert mismatches_with_recording(session, run_whatif(session, slab_blocks=64))  # and it differs, visibly


def test_design_switch_models_monolithic_copies(session):
    mono = run_whatif(session, design="monolithic").summary()
    slab = run_whatif(session, design="slab").summary()
    assert mono["grow_events"] > 0 and mono["bytes_copied_model"] > 0
    assert slab["bytes_copied_model"] == 0 and slab["slab_appends"] > 0


def test_other_block_size_replays_and_reports_skipped_trims(session):
    result = run_whatif(session, block_size=8)
    assert result.ops_replayed > 0
    assert all("trim" in s for s in result.skipped)
    assert result.summary()["peak_bytes_in_use"] > 0


def test_session_without_pool_is_a_clear_error(tmp_path):
    path = tmp_path / "dense.slabrec"
    write_synthetic(path, num_batches=3)
    with pytest.raises(ReplayError, match="no pool"):
        run_whatif(Session.open(path))


# ---- shrink (pool/shrink_types.py) --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    """A scripted slab recording whose every step ends with a compacting shrink point."""
    path = tmp_path_factory.mktemp("wi") / "compact.slabrec"
    _, pool, _ = record_scripted(path, steps=80, seed=3, shrink=ShrinkPolicy("compact", 1 << 30, 1.0))
    assert pool.counters().blocks_moved > 0 and pool.counters().slab_releases > 0
    return Session.open(path)


def test_recorded_shrink_policy_replays_its_moves_and_releases_exactly(compacted):
    result = run_whatif(compacted)
    assert result.config.shrink.mode == "compact" and result.shrink_points == 80
    assert mismatches_with_recording(compacted, result) == []
    final = compacted.snapshots[-1].snapshot.counters
    summary = result.summary()
    assert (summary["slab_releases"], summary["blocks_moved"]) == (final.slab_releases, final.blocks_moved) != (0, 0)
    assert summary["bytes_moved_model"] == final.bytes_moved_model
    # measured from the allocator: each moved row copied once (tiny 128-byte rows: allocator rounding on top)
    assert final.bytes_moved_model <= final.bytes_moved < 2 * final.bytes_moved_model


def test_another_shrink_policy_at_the_recorded_points(session, compacted):
    """An off recording replayed with compaction gives capacity back; the compacting one replayed with off keeps it
    (and both differ from their recordings, visibly)."""
    if session.geometry.design == "slab":
        off = run_whatif(session).summary()
        squeezed = run_whatif(session, shrink="compact", shrink_budget=1 << 30)
        assert squeezed.shrink_points == 80 and squeezed.summary()["slab_releases"] > 0
        assert squeezed.summary()["final_bytes_reserved"] < off["final_bytes_reserved"]
        assert mismatches_with_recording(session, squeezed)
    kept = run_whatif(compacted, shrink="off").summary()
    assert kept["slab_releases"] == 0 and kept["final_bytes_reserved"] > run_whatif(compacted).summary()[
        "final_bytes_reserved"]
    starved = run_whatif(compacted, shrink_budget=0).summary()  # releases of free slabs only: no block moves
    assert starved["blocks_moved"] == 0 and starved["slab_releases"] > 0


def test_a_recording_made_before_shrink_has_no_shrink_points():
    from pathlib import Path

    shipped = Session.open(Path(__file__).resolve().parents[2] / "assets" / "recordings" / "sample-churn-slab.slabrec")
    result = run_whatif(shipped, shrink="compact")
    assert result.shrink_points == 0 and result.summary()["slab_releases"] == 0
