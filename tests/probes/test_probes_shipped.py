"""The shipped recordings (format v1, written before the typed data model) open through the typed reader and show
the same figures the dict-based reader showed (v1-h200/: the H200 recordings of commit 46f1726, kept as v1 examples
when assets/recordings/gpu/ was re-recorded in v2): the numbers below were printed by the reader of commit 03dc2e7
(`Session.open`, `peak()`, `snapshot_at(duration / 2)`, `run_whatif(slab_blocks=8)`, `compare_sessions`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.compare import compare_sessions
from probes.events import Step
from probes.replay import Session
from probes.whatif import run_whatif

ROOT = Path(__file__).resolve().parents[2] / "assets" / "recordings"
# name: (samples, (peak footprint, at s), steps, ops, snapshots, mid: (layer-0 chunks, free rows, holes,
#        largest run, live blocks, bytes reserved) | None, what-if peak reserved with 8-block slabs,
#        whole-run compare row: (footprint max, busy tok/s, slabs held over all layers, max fragmentation,
#        mean gather runs per sequence per decode step): the figures of probes/figures.py)
EXPECTED = {
    "v1-h200/distinct_burst-dense.slabrec": (176, (11941630552.0, 1.741503), 96, 0, 0, None, None,
                                         (11941630552.0, 19284.38213869966, None, None, None)),
    "v1-h200/distinct_burst-monolithic.slabrec": (565, (68552058248.0, 5.62461), 96, 450, 4,
                                              (32, 0, 0, 0, 28672, 3758096384), 3875536896,
                                              (68552058248.0, 5901.749878849315, 924, 0.0, 1.0)),
    "v1-h200/distinct_burst-slab.slabrec": (821, (6895692936.0, 8.006473), 96, 450, 5, (32, 0, 0, 0, 28672, 3758096384),
                                        3787456512, (6895692936.0, 4055.814872246622, 924, 0.0, 4.96875)),
    "sample-churn-dense.slabrec": (169, (664292209.0, 8.206169), 45, 0, 0, None, None,
                                   (664292209.0, 67.59072117968259, None, None, None)),
    "sample-churn-slab.slabrec": (160, (616235177.0, 11.825563), 45, 184, 29, (10, 1, 1, 1, 1170, 29491200), 29491200,
                                  (616235177.0, 70.99991590609781, 300, 0.53125, 3.124031007751938)),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_v1_recording_shows_the_same_figures(name):
    samples, peak, steps, ops, snapshots, mid, whatif8, whole = EXPECTED[name]
    session = Session.open(ROOT / name)
    assert session.format_version == 1 and session.complete
    top = session.peak()
    assert len(session.samples) == samples and (top.value, round(top.t, 6)) == peak
    assert len(session.events_of(Step)) == steps and len(session.all_ops()) == ops
    assert len(session.snapshots) == snapshots
    if mid is None:
        assert session.snapshot_at(session.duration / 2) is None and not session.is_pool
    else:
        snap = session.snapshot_at(session.duration / 2)
        layer = snap.layers[0]
        got = (layer.num_chunks, layer.free_rows, layer.holes, layer.largest_free_run, snap.stats.live_blocks,
               snap.stats.bytes_reserved)
        assert got == mid
        last = session.snapshots[-1]  # a v1 summary (its num_slabs is num_chunks now) agrees with the rebuild
        rebuilt = session.snapshot_at(last.t)
        assert [layer.num_chunks for layer in last.snapshot.layers] == [layer.num_chunks for layer in rebuilt.layers]
        assert last.snapshot.layers[0].num_chunks > 0 and last.snapshot.stats == rebuilt.stats
        assert run_whatif(session, slab_blocks=8).summary()["peak_bytes_reserved"] == whatif8
    row = [r for r in compare_sessions([session]) if r.phase == "all"][0]
    assert (row.footprint_max, row.tokens_per_s, row.max_slabs, row.max_fragmentation, row.mean_runs) == whole


def test_migrate_rewrites_a_v1_recording_as_a_smaller_v3_one(tmp_path, capsys):
    from app.cli import main as cli_main

    new = tmp_path / "churn-v3.slabrec"
    assert cli_main(["migrate", str(ROOT / "sample-churn-slab.slabrec"), str(new)]) == 0
    assert "79,814 bytes (v1)" in capsys.readouterr().out
    old, migrated = Session.open(ROOT / "sample-churn-slab.slabrec"), Session.open(new)
    assert migrated.format_version == 3 and len(migrated.session_id) == 32 and new.stat().st_size < 60_000
    assert migrated.peak() == old.peak() and migrated.snapshot_at(5.0) == old.snapshot_at(5.0)
    assert migrated.meta["migrated_from_format"] == 1 and migrated.meta["format_version"] == 3
    assert cli_main(["migrate", str(new), str(tmp_path / "again.slabrec")]) == 1  # v3 in: refused, one line
    err = capsys.readouterr().err
    assert "only older recordings (v1, v2) are migrated" in err and err.count("\n") == 1
    assert not (tmp_path / "again.slabrec").exists()


@pytest.mark.parametrize("name", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "gpu").rglob("*.slabrec")))
def test_migrate_rewrites_a_v2_recording_as_v3_with_keyframes_holding_the_rows_once(tmp_path, capsys, name):
    """Format v2 keyframes held the rows once per layer; v3 once. Every shipped v2 recording migrates, the copy shows
    the same session (checked record by record by ``migrate`` itself, and here its pool at every snapshot), and
    its keyframes shrink: a pool's row arrays are stored once, not once per layer (inflated, the 28-layer H200
    recording's keyframes go from 208,111 to 18,217 bytes; zlib had already squeezed most of the copies out of
    the stored bytes: 5,518 to 3,544)."""
    from app.cli import main as cli_main

    from probes import format as fmt

    new = tmp_path / "v3.slabrec"
    assert cli_main(["migrate", str(ROOT / name), str(new)]) == 0
    out = capsys.readouterr().out
    assert "(v2) ->" in out and "(v3)" in out
    old, migrated = Session.open(ROOT / name), Session.open(new)
    assert migrated.format_version == 3 and migrated.meta["migrated_from_format"] == 2
    assert [old.snapshot_at(s.t) for s in old.snapshots] == [migrated.snapshot_at(s.t) for s in migrated.snapshots]
    images = [fmt.FileImage(path) for path in (ROOT / name, new)]
    stored = [sum(ref.length for ref in image.by_kind[fmt.KEYFRAME]) for image in images]
    inflated = [sum(len(image.payload(ref)) for ref in image.by_kind[fmt.KEYFRAME]) for image in images]
    assert stored[1] <= stored[0] and inflated[1] <= inflated[0]
    if old.is_pool:
        assert inflated[1] < inflated[0] / 2, inflated


@pytest.mark.parametrize("name", ["v1-h200/distinct_burst-monolithic.slabrec", "sample-churn-slab.slabrec"])
def test_recordings_made_before_copies_were_measured_keep_their_modelled_copies(name):
    """These recordings predate measured copies: no ``copied`` ops, and their ``bytes_copied`` was the model. The
    rebuild advances it by the book's model (so it equals every recorded summary), leaves the measured-era fields
    unrecorded (None), and the what-if check compares the model against it."""
    from probes.whatif import mismatches_with_recording

    session = Session.open(ROOT / name)
    assert not any(entry.op.name == "copied" for entry in session.all_ops())
    grew = False
    for record in session.snapshots:
        rebuilt = session.snapshot_at(record.t).counters
        assert rebuilt.bytes_copied == record.snapshot.counters.bytes_copied, record.t
        assert rebuilt.bytes_copied_model is None and rebuilt.cow_bytes_copied is None
        grew |= rebuilt.bytes_copied > session.keyframes[0].load().snapshot.counters.bytes_copied
    assert grew == name.startswith("v1-h200/"), "the monolithic run grows by copying after its first keyframe"
    assert mismatches_with_recording(session, run_whatif(session)) == []
