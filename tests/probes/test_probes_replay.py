"""Seek both ways and snapshot rebuild: the rebuilt snapshot equals the live one at that instant."""

from __future__ import annotations

import random

import msgspec
import pytest
from probes_scripted import record_scripted

from probes import format as fmt
from probes.replay import Session
from probes.recording import SessionRecorder
from probes.store import SessionModel
from pool import ShrinkPolicy


COMPACT = ShrinkPolicy("compact", 1 << 30, 1.0)


@pytest.fixture(scope="module", params=["slab", "monolithic", "slab-compact", "monolithic-compact"])
def scripted(request, tmp_path_factory):
    """A scripted recording; "-compact": every step ends with a compacting shrink point (blocks move, slabs go)."""
    design, _, shrink = request.param.partition("-")
    path = tmp_path_factory.mktemp("rec") / f"{request.param}.slabrec"
    probes, pool, live = record_scripted(path, design=design, shrink=COMPACT if shrink else None)
    if shrink:  # the rebuild below must have moves and releases to reproduce
        assert pool.counters().blocks_moved > 0 and pool.counters().slab_releases > 0
    return path, probes, pool, live


def _without_fused(snapshot):
    return msgspec.structs.replace(snapshot, layers=[msgspec.structs.replace(layer, fused=None)
                                                     for layer in snapshot.layers])


def _check_against_live(view, live, order_seed: int) -> None:
    """Every live snapshot equals the rebuilt one. Mid-step instants compare all but the per-layer "fused"
    verdict: for layers without a decision the pool reports a default computed from storage state at that
    instant, which the rebuild takes from the latest recorded snapshot (documented in probes/rebuild.py)."""
    instants = list(live)
    random.Random(order_seed).shuffle(instants)  # jumps forward and backward
    for t, expected, where in instants:
        rebuilt = view.snapshot_at(t)
        if where == "mid":
            rebuilt, expected = _without_fused(rebuilt), _without_fused(expected)
        assert rebuilt == expected, f"snapshot rebuilt at t={t:.6f} ({where}) differs from the live one"


def test_recording_rebuilds_live_snapshots_seeking_both_ways(scripted):
    path, probes, pool, live = scripted
    session = Session.open(path)
    assert session.complete and len(session.keyframes) >= 3
    assert len(live) > 60
    _check_against_live(session, live, order_seed=1)
    _check_against_live(session, sorted(live, key=lambda x: -x[0]), order_seed=2)
    assert session.snapshot_at(session.duration) == pool.snapshot()


def test_live_model_answers_like_the_recording(scripted):
    path, probes, pool, live = scripted
    model = SessionModel()
    for event in probes.sender.sink:  # what the worker sent over its transport, in order
        model.append(event)
    session = Session.open(path)
    assert model.complete and model.session_id == session.session_id and model.geometry == session.geometry
    assert model.samples.window().footprint == session.samples.window().footprint
    assert model.samples.window().t == session.samples.window().t
    assert model.all_ops() == session.all_ops() and model.events == session.events
    assert model.snapshots == session.snapshots and model.phases() == session.phases()
    assert model.peak() == session.peak() and model.frame_at(0.5) == session.frame_at(0.5)
    _check_against_live(model, live[::3], order_seed=3)
    assert model.snapshot_at(None) == pool.snapshot()  # following the live run: the latest full snapshot


def test_seek_returns_frames_in_either_direction(scripted):
    path, _, _, _ = scripted
    session = Session.open(path)
    end = session.duration
    late = session.seek(end * 0.9)
    early = session.seek(end * 0.4)
    assert session.cursor == pytest.approx(end * 0.4)
    assert late.step >= early.step and late.t > early.t
    assert early.sample is not None and early.sample.t <= early.t
    assert session.seek(-5).t == 0.0 and session.seek(1e9).t == pytest.approx(end)
    frames = list(session.iter_time(dt=end / 10))
    assert len(frames) == 11 and [f.t for f in frames] == sorted(f.t for f in frames)
    steps = [f.step for f in session.iter_steps()]
    assert steps == sorted(steps) and len(steps) == 60


def test_before_the_first_keyframe_there_is_no_snapshot(scripted):
    path, _, _, _ = scripted
    session = Session.open(path)
    assert session.snapshot_at(-1.0) is None


def test_geometry_and_session_id_are_in_the_metadata(scripted):
    """A session cut before its first keyframe still knows its pool (what-if does not call it dense)."""
    path, _, pool, _ = scripted
    session = Session.open(path)
    assert session.geometry == pool.config and len(session.session_id) == 32
    cut = path.parent / "cut.slabrec"
    image = fmt.FileImage(path)
    first_keyframe = image.by_kind[fmt.KEYFRAME][0]
    cut.write_bytes(path.read_bytes()[:first_keyframe.offset - fmt.RECORD_HEADER.size])
    early = Session.open(cut)
    assert not early.keyframes and early.geometry == pool.config and early.is_pool


def _book_stream():
    """A keyframe at t=1.0, then an op stamped at the very same instant (it came after the snapshot), then a
    plain snapshot at t=2.0: typed worker events as a live model or the recorder receives them."""
    from pool import BlockBook, build_snapshot
    from pool.ops import AddSequence
    from probes.events import MetaUpdate, OpBatch, SnapshotTaken
    from probes.rebuild import modelled_observed

    book = BlockBook(2, 4, "slab", 4)
    book.add_sequence(0)
    book.prepare_write(0, 0, 6)
    first = build_snapshot(book, modelled_observed(book))
    state = book.state()
    book.add_sequence(1)
    later = build_snapshot(book, modelled_observed(book))
    return first, later, [MetaUpdate(t=10.0, meta={"t_start": 10.0}),
                          SnapshotTaken(t=11.0, snapshot=first, keyframe=False, book_state=state),
                          OpBatch(t=11.0, ops=[AddSequence(1)], op_t=[11.0]),
                          SnapshotTaken(t=12.0, snapshot=later)]


def test_ops_stamped_at_a_snapshot_instant_come_after_it(tmp_path):
    """At a snapshot's own instant the pool is the snapshot: an op with the same time stamp came after it. And a
    stream that flags no keyframe still gets its first full snapshot as one (live model and recording alike)."""
    first, later, events = _book_stream()
    model = SessionModel()
    for event in events:
        model.append(event)
    recorder = SessionRecorder(tmp_path / "tie.slabrec", events[0].meta, 10.0)
    recorder.write(events[1:])
    recorder.close({}, t=12.5)
    session = Session.open(tmp_path / "tie.slabrec")
    model._recent.clear()  # white-box: no kept full snapshot, so the live model rebuilds like the recording
    for view in (model, session):
        assert len(view.keyframes) == 1 and view.keyframes[0].load().book_state is not None
        assert view.snapshot_at(1.0) == first and view.snapshot_at(1.5).seq_rows == later.seq_rows
