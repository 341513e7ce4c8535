"""The TUI's data layer: sessions on screen are the probes' read model, fed with typed worker events; cursor
queries; errors; the sample columns under a concurrent writer; the footprint gate."""

from __future__ import annotations

import sys
import threading
import time

from tui_fixtures import event_stream, sample

from app.tui.data import SessionSet, ViewState
from app.tui.views.memory import chart_data
from app.tui.views.memory_header import verdict_line as ratio_line
from app.tui.views.sessions import compare_rows
from app.tui.widgets.memory_chart import decimate
from probes.events import FusedChange, LogLine, MetaUpdate, OpBatch, Step, WorkerError
from probes.store import SessionModel


def fed(backend="slab", **kw) -> SessionModel:
    model = SessionModel(backend)
    for ev in event_stream(backend, **kw):
        model.append(ev)
    return model


def test_model_folds_every_event_kind():
    model = fed("slab", steps=10)
    assert model.meta["backend"] == "slab" and model.geometry.num_layers == 3
    assert len(model.samples) == 10 and len(model.events_of(Step)) == 10 and len(model.snapshots) == 10
    assert [(p.name, p.start, p.end) for p in model.phases()] == [("burst", 0.0, 5.0)]
    steps = model.events_of(Step)
    assert steps[0].type == "prefill" and steps[1].type == "decode"
    assert model.status == "done" and model.summary.summary["steps"] == 10
    assert model.overhead.cost_fraction == 0.011  # the END summary's figure wins over the periodic probe_stats
    assert len(model.events_of(FusedChange)) == 10 and model.all_ops()[0].op.name == "add_sequence"


def test_cursor_queries():
    model = fed("slab", steps=10)
    assert model.summary_at(2.2).t == 2.0 and model.summary_at(0.1) is None  # before the first snapshot
    assert model.snapshot_at(0.1) is None and model.snapshot_at(2.2).seq_rows == model.snapshot_at(2.0).seq_rows
    assert model.sample_index(1.0) == 2 and model.sample_index(None) == 10
    assert model.peak().t == 5.0  # footprint grows every step in the fixture (max at the last step)
    assert model.phase_at(3.0) == "burst"


def test_view_state_follows_live_and_holds_at_the_cursor():
    sessions = SessionSet()
    sessions.ingest("dense", event_stream("dense", steps=4))
    sessions.ingest("slab", event_stream("slab", steps=4))
    assert [m.label for m in sessions.pool_sessions()] == ["slab"]
    live = ViewState(sessions, cursor=None)
    assert live.pool_session().label == "slab" and live.snapshot()[0] == 2.0
    assert live.snapshot()[1] is sessions.sessions["slab"].snapshot_at(None)  # the kept full snapshot, no rebuild
    held = ViewState(sessions, cursor=1.2)
    assert held.snapshot()[0] == 1.2 and held.snapshot()[1].stats == sessions.sessions["slab"].summary_at(1.0) \
        .snapshot.stats
    assert ViewState(sessions, cursor=None, pool_name="nope").pool_session().label == "slab"
    generation = sessions.generation
    sessions.reset()
    assert sessions.sessions == {} and sessions.generation == generation + 1
    assert not sessions.ingest("slab", event_stream("slab", steps=2), generation)  # an orphaned writer is refused


def test_error_is_kept_and_first_wins():
    model = SessionModel("slab")
    model.append(WorkerError(t=1.0, text="ValueError: boom", traceback="tb"))
    model.fail("later")
    assert model.status == "error" and model.error.text == "ValueError: boom" and model.error.traceback == "tb"
    assert len(model.events_of(WorkerError)) == 1


def test_late_metadata_merges_and_other_events_stay_on_the_timeline():
    model = SessionModel("slab")
    model.append(MetaUpdate(t=5.0, meta={"t_start": 5.0, "backend": "slab"}))
    model.append(LogLine(t=6.0, text="hello"))
    model.append(MetaUpdate(t=7.0, meta={"next_request_tokens": 64}))
    assert model.meta == {"t_start": 5.0, "backend": "slab", "next_request_tokens": 64}
    assert [(e.t, e.text) for e in model.events] == [(1.0, "hello")]


def test_sample_columns_are_consistent_under_a_concurrent_writer():
    """One thread appends samples (as the ingest thread does) while this one does what the memory view does:
    chart data from every column, then decimation. The old columns appended ``t`` before ``footprint`` and the
    view sliced ``footprint[:len(t)]``: with a thread switch every microsecond that raised IndexError in
    ``decimate`` within a fraction of a second. Columns cut at one published row count never disagree."""
    sessions = SessionSet()
    model = sessions.session("slab")
    model.append(MetaUpdate(t=0.0, meta={"t_start": 0.0}))
    frames = [ViewState(sessions, cursor=None, x_mode=mode) for mode in ("time", "step", "tokens")]
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.is_set():  # until the reader has raced it long enough
            model.append(sample(i * 0.01, i, i, active=1e6 + (i * 7919) % 1000, cache=1e3))
            i += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    reads, deadline = 0, time.monotonic() + 120  # the deadline bounds a hang; both sides' progress ends the race
    try:
        while reads < 100 or len(model.samples) < 10000:
            assert time.monotonic() < deadline
            for series in chart_data(frames[reads % 3]).series:  # x by time, step and tokens in turn
                assert len(series.xs) == len(series.ys)
                decimate(series.xs, series.ys, 40)
            reads += 1
    finally:
        stop.set()
        writer.join()
        sys.setswitchinterval(interval)


def _two_runs(slab_active: float, dense_active: float) -> SessionSet:
    sessions = SessionSet()
    for name, active in (("slab", slab_active), ("dense", dense_active)):
        model = sessions.session(name)
        model.append(MetaUpdate(t=0.0, meta={"t_start": 0.0, "backend": name}))
        model.append(sample(1.0, 1, 10, active=active, cache=0))
    return sessions


def test_footprint_gate_is_shown_exceeded_and_ok():
    """slab at 1.3x dense with a 1.15x gate: EXCEEDED (memory view and the compare table's warning style); at
    1.1x: ok. Making the gate always "ok" fails here."""
    over = ViewState(_two_runs(130e6, 100e6), cursor=None, gate=1.15)
    line = ratio_line(over).plain
    assert "1.30x (gate 1.15x EXCEEDED)" in line
    ratio_cell = compare_rows(over)[0][3]
    assert ratio_cell.plain == "1.30x" and ratio_cell.style == "bold #d9573a"
    under = ViewState(_two_runs(110e6, 100e6), cursor=None, gate=1.15)
    assert "1.10x (gate 1.15x ok)" in ratio_line(under).plain and "EXCEEDED" not in ratio_line(under).plain
    assert compare_rows(under)[0][3].style == "bold #2aa876"


def test_a_new_event_kind_needs_only_its_type_and_its_view(tmp_path):
    """``RequestDone`` (probes/events.py) is recorded, replayed and drawn (the Memory view's lane) with no change
    to the transport, the recorder, the reader or the read model."""
    from app.tui.views.memory import MemoryView
    from probes.events import RequestDone
    from probes.recording import SessionRecorder
    from probes.replay import Session
    from probes.transport import decode_batch, encode_batch

    events = [MetaUpdate(t=10.0, meta={"t_start": 10.0, "backend": "slab"}),
              RequestDone(t=11.5, step=3, tokens=40, req_id=7, seq_id=2, prompt_tokens=32, generated_tokens=8)]
    wire = decode_batch(encode_batch(events))
    recorder = SessionRecorder(tmp_path / "r.slabrec", wire[0].meta, 10.0)
    recorder.write(wire[1:])
    recorder.close({}, t=12.0)
    session = Session.open(tmp_path / "r.slabrec", label="slab")
    assert session.events_of(RequestDone) == [RequestDone(t=1.5, step=3, tokens=40, req_id=7, seq_id=2,
                                                          prompt_tokens=32, generated_tokens=8)]
    sessions = SessionSet()
    sessions.add(session)
    lanes = MemoryView._phase_lanes(ViewState(sessions, cursor=None))
    assert [t for t, _mark, _style in lanes["✓ slab"]] == [1.5]


def test_ops_keep_their_own_times():
    model = fed("slab", steps=3)
    ops = model.all_ops()
    assert [entry.i for entry in ops] == list(range(len(ops))) and {entry.t for entry in ops} == {0.5, 1.5}
    assert isinstance(event_stream("slab", steps=1)[3], OpBatch)
