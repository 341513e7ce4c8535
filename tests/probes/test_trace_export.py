"""``slabscope export``: the shipped recordings (and a synthetic session) as Chrome JSON and Perfetto protobuf
traces. Each file is parsed back and checked as a viewer would read it: one named process per session, the
expected counter, slice and instant tracks, slices that nest on their track, every event on a described track,
and values that are the recording's own (the footprint track's maximum is the session's measured peak)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from pool.ops import Release, SlabAppend
from probes import figures
from probes.events import FusedChange, GatherRuns, RequestDone, Step, WorkerError
from probes.replay import Session
from probes.trace_export import TRACKS, layer_label, trace_process, trace_processes

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = sorted(str(p) for p in (REPO / "assets" / "recordings").rglob("*.slabrec"))
POOL_COUNTERS = {"pool live", "pool reserved"}
MEMORY_COUNTERS = {"footprint (active+cache)", "MLX active", "MLX cache", "RSS"}


def _chrome(paths, tmp_path, name="trace.json"):
    out = tmp_path / name
    result = subprocess.run([sys.executable, "-m", "app", "export", *paths, "--out", str(out)], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and "chrome" in result.stdout
    return json.loads(out.read_text())


def _check_chrome_structure(trace: dict) -> dict:
    """Validate the Trace Event Format as viewers read it; returns {pid: {"name", "counters", "threads",
    "marks": {thread: [event]}}}."""
    assert isinstance(trace["traceEvents"], list)
    processes: dict = defaultdict(lambda: {"counters": defaultdict(list), "threads": {}, "marks": defaultdict(list)})
    for event in trace["traceEvents"]:
        assert event["ph"] in ("M", "C", "X", "i") and isinstance(event["pid"], int) and isinstance(event["name"], str)
        proc = processes[event["pid"]]
        if event["ph"] == "M":
            if event["name"] == "process_name":
                proc["name"] = event["args"]["name"]
            elif event["name"] == "thread_name":
                proc["threads"][event["tid"]] = event["args"]["name"]
            continue
        assert isinstance(event["ts"], int) and event["ts"] >= 0
        if event["ph"] == "C":
            (value,) = event["args"].values()
            assert isinstance(value, (int, float))
            proc["counters"][event["name"]].append((event["ts"], value))
        else:
            assert event["tid"] in proc["threads"], "an event on an unnamed thread"
            if event["ph"] == "X":
                assert isinstance(event["dur"], int) and event["dur"] >= 0
            else:
                assert event["s"] == "t"
            proc["marks"][proc["threads"][event["tid"]]].append(event)
    for proc in processes.values():
        assert proc["name"]
        assert sorted(proc["threads"].values()) == sorted(TRACKS)
        for marks in proc["marks"].values():  # complete events on one thread must nest: no partial overlap
            slices = sorted((e["ts"], e["ts"] + e["dur"]) for e in marks if e["ph"] == "X")
            for (_, end), (start, _) in zip(slices, slices[1:]):
                assert start >= end
        for values in proc["counters"].values():
            assert [ts for ts, _ in values] == sorted(ts for ts, _ in values)
    return processes


@pytest.mark.parametrize("path", RECORDINGS, ids=[Path(p).name for p in RECORDINGS])
def test_each_shipped_recording_exports_as_a_valid_chrome_trace(path, tmp_path):
    session = Session.open(path)
    (proc,) = _check_chrome_structure(_chrome([path], tmp_path)).values()
    assert Path(path).name in proc["name"] and session.meta["backend"] in proc["name"]
    counters = proc["counters"]
    assert MEMORY_COUNTERS <= set(counters)
    peak = max(v for _, v in counters["footprint (active+cache)"])
    assert peak == session.peak("footprint").value
    assert len([e for e in proc["marks"]["steps"] if e["ph"] == "X"]) == len(session.events_of(Step))
    assert [e["name"] for e in proc["marks"]["phases"]] == [span.name for span in session.phases()]
    if session.is_pool:
        layers = session.geometry.num_layers
        for what in ("slabs", "occupancy", "fragmentation"):
            named = [name for name in counters if name.startswith(f"{what} L")]
            assert named and _layers_covered(named) == list(range(layers)), named
        assert POOL_COUNTERS <= set(counters) and max(v for _, v in counters["pool reserved"]) > 0
        runs = figures.gather_runs(session)  # measured steps, or the op log's (a recording without GatherRuns)
        assert max(v for _, v in counters["gather runs max (step)"]) == runs.max
        assert max(v for _, v in counters["slabs (all layers)"]) == figures.slab_count(session)
        appends = sum(isinstance(entry.op, SlabAppend) for entry in session.all_ops())
        assert sum(e["name"] == "slab append" for e in proc["marks"]["pool"]) == appends
        releases = sum(isinstance(entry.op, Release) for entry in session.all_ops())
        assert sum(e["name"] == "release sequence" for e in proc["marks"]["pool"]) == releases
        decisions = session.events_of(FusedChange)
        assert len(proc["marks"]["decisions"]) == len(decisions)
        assert all(e["args"]["reason"] for e in proc["marks"]["decisions"])
    else:
        assert not POOL_COUNTERS & set(counters) and not proc["marks"]["pool"]


def _layers_covered(names: list[str]) -> list[int]:
    """Layers named by counter suffixes like "L0-2,5"."""
    layers = []
    for name in names:
        for part in name.rsplit(" L", 1)[1].split(","):
            lo, _, hi = part.partition("-")
            layers += range(int(lo), int(hi or lo) + 1)
    return sorted(layers)


def test_sessions_sit_side_by_side_one_process_each(tmp_path):
    gpu = str(REPO / "assets" / "recordings" / "gpu")
    processes = _check_chrome_structure(_chrome([gpu], tmp_path))
    names = sorted(p["name"] for p in processes.values())
    assert len(processes) == 3 and [n.split(" · ")[0] for n in names] == ["dense", "monolithic", "slab"]
    starts = {pid: min(ts for values in p["counters"].values() for ts, _ in values) for pid, p in processes.items()}
    assert max(starts.values()) < 1_000_000  # each from its own start (µs since the session began)
    monolithic = next(p for p in processes.values() if p["name"].startswith("monolithic"))
    assert any(e["name"] == "grow by copy" and e["args"]["bytes_copied"] > 0 for e in monolithic["marks"]["pool"])


def _perfetto(paths, tmp_path):
    protos = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    out = tmp_path / "trace.pftrace"
    result = subprocess.run([sys.executable, "-m", "app", "export", *paths, "--format", "perfetto", "--out",
                             str(out)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return protos, protos.Trace.FromString(out.read_bytes())


def _check_perfetto_structure(protos, trace) -> dict:
    """Validate as the trace processor reads TrackEvent: tracks described before use, one process per session,
    counters on counter tracks, SLICE_BEGIN/END balanced and nested per track. Returns {process name: {"counters":
    {name: [(ts, value)]}, "tracks": {name: [(type, name, ts)]}}}."""
    tracks, processes = {}, {}
    for packet in trace.packet:
        assert packet.trusted_packet_sequence_id == 1
        if packet.HasField("track_descriptor"):
            desc = packet.track_descriptor
            assert desc.uuid not in tracks
            tracks[desc.uuid] = desc
            if desc.HasField("process"):
                processes[desc.uuid] = {"name": desc.process.process_name, "counters": defaultdict(list),
                                        "tracks": defaultdict(list)}
            else:
                assert desc.parent_uuid in processes
    assert trace.packet[0].sequence_flags == protos.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    open_slices, begun = Counter(), {}
    for packet in trace.packet:
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        desc = tracks[event.track_uuid]  # KeyError: an event on an undescribed track
        proc = processes[desc.parent_uuid]
        if event.type == protos.TrackEvent.TYPE_COUNTER:
            assert desc.HasField("counter")
            value = event.counter_value if event.HasField("counter_value") else event.double_counter_value
            proc["counters"][desc.name].append((packet.timestamp, value))
            continue
        assert not desc.HasField("counter")
        if event.type == protos.TrackEvent.TYPE_SLICE_BEGIN:
            open_slices[event.track_uuid] += 1
            assert open_slices[event.track_uuid] == 1, "slices on one track must not overlap"
            begun[event.track_uuid] = packet.timestamp
        elif event.type == protos.TrackEvent.TYPE_SLICE_END:
            open_slices[event.track_uuid] -= 1
            assert open_slices[event.track_uuid] == 0
            assert packet.timestamp >= begun[event.track_uuid], f"{desc.name}: a slice ends before it begins"
        proc["tracks"][desc.name].append((event.type, event.name, packet.timestamp))
    assert not +open_slices
    return {p["name"]: p for p in processes.values()}


def test_shipped_recordings_export_as_perfetto_protobuf_with_the_same_tracks(tmp_path):
    protos, trace = _perfetto(RECORDINGS, tmp_path)
    processes = _check_perfetto_structure(protos, trace)
    chrome = _check_chrome_structure(_chrome(RECORDINGS, tmp_path))
    assert sorted(processes) == sorted(p["name"] for p in chrome.values())
    for proc in chrome.values():
        twin = processes[proc["name"]]
        assert set(twin["counters"]) == set(proc["counters"])
        for name, values in proc["counters"].items():  # same values; µs vs ns timestamps
            assert [v for _, v in twin["counters"][name]] == pytest.approx([v for _, v in values])
            # the same instants: ns rounded to us may differ by 1 from the time rounded to us directly
            assert all(abs(ts_ns / 1000 - ts_us) <= 1 for (ts_ns, _), (ts_us, _) in zip(twin["counters"][name], values))
        for track, marks in proc["marks"].items():
            begins = [m for m in twin["tracks"][track] if m[0] != protos.TrackEvent.TYPE_SLICE_END]
            assert [name for _, name, _ in begins] == [e["name"] for e in marks]
            # every slice spans what the Chrome trace's complete event spans (ns vs us, each rounded once)
            slices = _perfetto_slices(protos, twin["tracks"][track])
            spans = [(e["ts"], e["dur"]) for e in marks if e["ph"] == "X"]
            assert len(slices) == len(spans)
            for (begin_ns, end_ns), (ts_us, dur_us) in zip(slices, spans):
                assert abs(begin_ns / 1000 - ts_us) <= 1 and abs((end_ns - begin_ns) / 1000 - dur_us) <= 2
    assert any(_perfetto_slices(protos, marks) for p in processes.values() for marks in p["tracks"].values())


def _perfetto_slices(protos, marks) -> list[tuple[int, int]]:
    """(begin, end) timestamps of a track's SLICE_BEGIN/SLICE_END pairs, in order."""
    begin = protos.TrackEvent.TYPE_SLICE_BEGIN
    stamps = [(kind, ts) for kind, _, ts in marks if kind in (begin, protos.TrackEvent.TYPE_SLICE_END)]
    return [(a[1], b[1]) for a, b in zip(stamps[::2], stamps[1::2])]


def test_errors_and_other_event_kinds_become_instants(tmp_path):
    """A WorkerError goes to the errors track; an event kind export does not special-case (RequestDone) still
    shows on the events track with its fields, so a new kind needs no change here."""
    session = Session.open(RECORDINGS[0])
    session.add_event(RequestDone(t=1.0, step=3, tokens=30, req_id=7, seq_id=2, prompt_tokens=20,
                                  generated_tokens=10))
    session.add_event(WorkerError(t=1.5, step=4, tokens=40, text="boom"))
    process = trace_process(session, 1, "x")
    (error,) = process.tracks["errors"]
    assert error.name == "error" and error.args["text"] == "boom"
    done = [m for m in process.tracks["events"] if m.name == "request_done"]
    assert done and done[-1].args["req_id"] == 7 and done[-1].args["generated_tokens"] == 10


def test_synthetic_session_counters_follow_the_pool(tmp_path):
    """A synthetic session (a real BlockBook's op log): the slab counter follows the recorded snapshots, the
    occupancy counter is rows in use over capacity, and counters keep only changes."""
    from probes.synthetic import write_synthetic_session

    path = tmp_path / "synthetic.slabrec"
    write_synthetic_session(path, seconds=30, num_layers=3)
    session = Session.open(path)
    (process,) = trace_processes([(session, str(path))])
    slabs = process.counter("slabs L0-2")
    occupancy = process.counter("occupancy L0-2")
    assert slabs is not None and occupancy is not None  # the book moves its layers in lockstep: one track each
    last = session.snapshots[-1].snapshot.layers[0]
    assert slabs.values[-1] == last.num_chunks
    assert occupancy.values[-1] == pytest.approx((last.capacity_rows - last.free_rows) / last.capacity_rows)
    for counter in process.counters:
        assert all(a != b for a, b in zip(counter.values, counter.values[1:])), counter.name


def test_layer_labels():
    assert layer_label([0, 1, 2, 5]) == "L0-2,5"
    assert layer_label([3]) == "L3"
    assert layer_label([0, 2, 3, 4, 7, 8]) == "L0,2-4,7-8"


def test_bad_input_writes_nothing(tmp_path):
    out = tmp_path / "trace.json"
    bad = tmp_path / "bad.slabrec"
    bad.write_bytes(b"not a recording")
    for argv, fragment in ((["missing.slabrec"], "cannot read"), ([str(bad)], "bad.slabrec"),
                           ([RECORDINGS[0], "--format", "svg"], "invalid choice")):
        result = subprocess.run([sys.executable, "-m", "app", "export", *argv, "--out", str(out)], cwd=REPO,
                                capture_output=True, text=True)
        assert result.returncode == 2 and fragment in result.stderr and len(result.stderr.splitlines()) == 1
        assert not out.exists() and os.listdir(tmp_path) == ["bad.slabrec"]
    result = subprocess.run([sys.executable, "-m", "app", "export", RECORDINGS[0], "--out",
                             str(tmp_path / "no" / "t.json")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2 and "does not exist" in result.stderr


def test_overlapping_step_stamps_are_clamped_so_slices_nest():
    """A step's start is its end minus its wall time; stamp jitter can put it before the previous step's end:
    the slice then starts at that end (a viewer drops or mis-nests partially overlapping slices)."""
    from probes.events import MetaUpdate
    from probes.store import SessionModel

    model = SessionModel("steps")
    model.append(MetaUpdate(t=10.0, meta={"t_start": 10.0}))
    for t, wall in ((11.0, 0.5), (11.4, 0.5), (12.0, 0.1)):
        model.append(Step(t=t, phase="p", type="decode", batch=1, num_tokens=1, wall_s=wall))
    steps = trace_process(model, 1, "x").tracks["steps"]
    assert [(round(m.t, 6), round(m.dur, 6)) for m in steps] == [(0.5, 0.5), (1.0, 0.4), (1.9, 0.1)]


def test_rank_recordings_and_same_named_files_are_processes_of_their_own():
    """Rank recordings say their rank; two runs' files of one name (gpu/ and gpu/nccl2/) stay apart."""
    gpu = REPO / "assets" / "recordings" / "gpu"
    paths = [str(gpu / "distinct_burst-dense.slabrec"), str(gpu / "nccl2" / "distinct_burst-dense.slabrec"),
             str(gpu / "nccl2" / "distinct_burst-dense-rank1.slabrec")]
    names = [p.name for p in trace_processes([(Session.open(path), path) for path in paths])]
    assert len(set(names)) == 3
    assert names[0].endswith("(gpu/distinct_burst-dense.slabrec)")
    assert names[1].endswith("(nccl2/distinct_burst-dense.slabrec)")
    assert "rank 1" in names[2] and names[2].endswith("(distinct_burst-dense-rank1.slabrec)")
