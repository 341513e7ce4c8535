"""The TUI's store: folding worker events into tracks, cursor queries, thinning, errors."""

from __future__ import annotations

from tui_fixtures import event_stream

from app.tui import data
from app.tui.data import Frame, Store, Track


def fed(backend="slab", **kw) -> Track:
    track = Track(backend)
    for ev in event_stream(backend, **kw):
        track.add(ev)
    return track


def test_track_folds_every_event_kind():
    track = fed("slab", steps=10)
    assert track.t0 == 1000.0 and track.meta["backend"] == "slab"
    assert len(track.samples) == 10 and len(track.steps) == 10 and len(track.snapshots) == 10
    assert [(p.name, p.start, p.end) for p in track.phases] == [("burst", 0.0, 5.0)]
    assert track.steps[0].type == "prefill" and track.steps[1].type == "decode"
    assert track.status == "done" and track.done["steps"] == 10
    assert track.probe_overhead() == "1.10%"  # the END summary's figure wins over the periodic probe_stats
    assert len(track.fused) == 10 and track.ops[0][1] == {"op": "add_sequence", "seq": 1}


def test_cursor_queries():
    track = fed("slab", steps=10)
    assert track.snapshot_at(None)[0] == 5.0
    assert track.snapshot_at(2.2)[0] == 2.0
    assert track.snapshot_at(0.1) is None  # before the first snapshot
    assert track.sample_index(1.0) == 2 and track.sample_index(None) == 10
    assert track.peak_time() == 5.0  # footprint grows every step in the fixture (max at the last step)
    assert track.phase_at(3.0) == "burst"


def test_history_limits():
    track = fed("slab", steps=20)
    assert [t for t, _s, _snap in track.history(3.0)] == [0.5 * k for k in range(1, 7)]
    assert len(track.history(None, limit=4)) == 4
    spread = track.history(None, limit=-5)
    assert len(spread) == 6 and spread[0][0] == 0.5 and spread[-1][0] == 10.0


def test_snapshots_are_thinned_not_unbounded(monkeypatch):
    monkeypatch.setattr(data, "MAX_SNAPSHOTS", 8)
    track = fed("slab", steps=30)
    assert len(track.snapshots) <= 8
    times = [s[0] for s in track.snapshots]
    assert times == sorted(times) and times[-1] == 15.0  # the newest snapshot is always kept


def test_error_is_kept_and_first_wins():
    track = Track("slab")
    track.add({"kind": "error", "t": 1.0, "text": "ValueError: boom", "traceback": "tb"})
    track.fail("later")
    assert track.status == "error" and track.error == "ValueError: boom" and track.traceback == "tb"


def test_unknown_kinds_are_ignored_but_counted():
    track = Track("slab")
    track.add({"kind": "weird", "t": 5.0})
    assert track.events_seen == 1 and track.status == "running"


def test_store_and_frame_pick_pool_tracks():
    store = Store()
    store.ingest("dense", event_stream("dense", steps=4))
    store.ingest("slab", event_stream("slab", steps=4))
    assert [t.name for t in store.pool_tracks()] == ["slab"]
    frame = Frame(store, cursor=None)
    assert frame.pool_track().name == "slab" and frame.snapshot()[0] == 2.0
    assert Frame(store, cursor=None, pool_name="nope").pool_track().name == "slab"
    gen = store.generation
    store.reset()
    assert store.tracks == {} and store.generation == gen + 1
