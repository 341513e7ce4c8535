"""Session file format: round trip, torn tails, corruption, foreign files (one-line RecordingError)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from probes import format as fmt
from probes.errors import RecordingError
from probes.replay import Session
from probes.synthetic import write_synthetic_session
from probes_helpers import T0, write_synthetic


def test_round_trip_keeps_every_record(tmp_path):
    path = tmp_path / "s.slabrec"
    batches = write_synthetic(path, num_batches=20)
    s = Session.open(path)
    assert s.complete and s.incomplete_tail_bytes == 0
    assert s.meta["scenario"] == "synthetic" and s.meta["t_start"] == T0
    expected = [e for b in batches for e in b if e["kind"] == "sample"]
    assert [x["footprint"] for x in s.samples] == [e["footprint"] for e in expected]
    assert s.samples[0]["t"] == 0.0 and s.samples[-1]["t"] == pytest.approx(expected[-1]["t"] - T0)
    assert s.summary["summary"] == {"throughput_tok_s": 123.0}
    assert [p["name"] for p in s.phases()] == ["decode"]


def test_large_payloads_are_compressed_and_read_back(tmp_path):
    path = tmp_path / "big.slabrec"
    writer = fmt.RecordWriter(path)
    big = [{"kind": "log", "t": float(i), "text": "x" * 100} for i in range(100)]
    writer.append([(fmt.META, 0.0, {"a": 1}), (fmt.EVENTS, 0.0, big)])
    writer.close()
    image = fmt.FileImage(path)
    assert image.refs[1].flags & fmt.FLAG_ZLIB
    assert image.decode(image.refs[1]) == big


def test_torn_tail_opens_with_every_complete_record(tmp_path):
    path = tmp_path / "s.slabrec"
    write_synthetic(path, num_batches=10)
    data = path.read_bytes()
    image = fmt.FileImage(path)
    last = image.refs[-1]
    cut = tmp_path / "cut.slabrec"
    cut.write_bytes(data[: last.offset + last.length // 2])
    s = Session.open(cut)
    assert not s.complete and s.incomplete_tail_bytes > 0
    full = Session.open(path)
    assert s.samples == full.samples  # the END record was the torn one


@pytest.mark.parametrize("content, words", [
    (b"", "not a slabscope recording"),
    (b"PK\x03\x04 zip file here" * 3, "bad magic"),
    (b"SLABSC", "truncated"),
    (fmt.FILE_HEADER.pack(fmt.MAGIC, 99, 0), "format v99 is not supported"),
    (fmt.FILE_HEADER.pack(fmt.MAGIC, 1, 0), "no metadata"),
])
def test_bad_files_give_one_line_error(tmp_path, content, words):
    path = tmp_path / "bad.slabrec"
    path.write_bytes(content)
    with pytest.raises(RecordingError) as info:
        Session.open(path)
    message = str(info.value)
    assert words in message and "\n" not in message and str(path) in message


def test_missing_file_is_a_recording_error(tmp_path):
    with pytest.raises(RecordingError, match="cannot read"):
        Session.open(tmp_path / "nope.slabrec")


def test_flipped_byte_in_the_middle_is_reported_as_corrupt(tmp_path):
    path = tmp_path / "s.slabrec"
    write_synthetic(path, num_batches=10)
    data = bytearray(path.read_bytes())
    ref = fmt.FileImage(path).refs[3]
    data[ref.offset + 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(RecordingError, match="checksum mismatch"):
        Session.open(path)


_GOOD: dict[str, bytes] = {}


def _good_bytes(tmp_path_factory, which: str) -> bytes:
    """Two valid files: samples/events only, and a pool session (ops, snapshots, keyframes with book state)."""
    if not _GOOD:
        folder = tmp_path_factory.mktemp("fuzz")
        write_synthetic(folder / "plain.slabrec", num_batches=6)
        write_synthetic_session(folder / "pool.slabrec", seconds=2.0, num_layers=2, keyframe_interval_s=0.5)
        _GOOD.update({name: (folder / f"{name}.slabrec").read_bytes() for name in ("plain", "pool")})
    return _GOOD[which]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_files_open_or_raise_recording_error_only(tmp_path_factory, data):
    good = _good_bytes(tmp_path_factory, data.draw(st.sampled_from(["plain", "pool"])))
    mode = data.draw(st.sampled_from(["truncate", "flip", "splice", "random"]))
    if mode == "truncate":
        blob = good[: data.draw(st.integers(0, len(good)))]
    elif mode == "flip":
        blob = bytearray(good)
        for pos in data.draw(st.lists(st.integers(0, len(good) - 1), min_size=1, max_size=4)):
            blob[pos] ^= data.draw(st.integers(1, 255))
        blob = bytes(blob)
    elif mode == "splice":
        at = data.draw(st.integers(0, len(good)))
        blob = good[:at] + data.draw(st.binary(max_size=64)) + good[at:]
    else:
        blob = fmt.FILE_HEADER.pack(fmt.MAGIC, 1, 0) + data.draw(st.binary(max_size=200))
    path = tmp_path_factory.mktemp("f") / "x.slabrec"
    path.write_bytes(blob)
    try:
        s = Session.open(path)
    except RecordingError as exc:
        assert "\n" not in str(exc)
        return
    # Opened: every query answers, or (lazily decoded parts) raises the same one-line RecordingError.
    try:
        s.duration, s.phases(), s.peak(), s.frame_at(0.5), s.ops, list(s.replay_events()), s.snapshot_at(1.0)
    except RecordingError as exc:
        assert "\n" not in str(exc)
    assert len(s.samples) <= 20
    os.remove(path)
