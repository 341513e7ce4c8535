"""Session file format: round trip, torn tails, corruption, foreign files (one-line RecordingError). The fuzz
suite is tests/probes/test_recording_fuzz.py; issue 12's hostile files, tests/probes/test_recording_hostile.py."""

from __future__ import annotations


import pytest

import msgspec
from probes_helpers import T0, write_synthetic

from probes import codec
from probes import format as fmt
from probes.errors import RecordingDamage, RecordingError
from probes.events import LogLine, Sample, Step
from probes.replay import Session


def test_round_trip_keeps_every_record(tmp_path):
    path = tmp_path / "s.slabrec"
    batches = write_synthetic(path, num_batches=20)
    s = Session.open(path)
    assert s.complete and s.incomplete_tail_bytes == 0
    assert s.meta["scenario"] == "synthetic" and s.meta["t_start"] == T0 and s.format_version == 3
    expected = [e for b in batches for e in b if isinstance(e, Sample)]
    samples = s.samples.window()
    assert samples.footprint == [e.footprint for e in expected]
    assert samples.t[0] == 0.0 and samples.t[-1] == pytest.approx(expected[-1].t - T0)
    assert s.samples.at(3) == msgspec.structs.replace(expected[3], t=samples.t[3])  # typed, every field kept
    assert s.summary.summary == {"throughput_tok_s": 123.0}
    assert [p.name for p in s.phases()] == ["decode"] and len(s.events_of(Step)) == 6


def test_large_payloads_are_compressed_and_read_back(tmp_path):
    path = tmp_path / "big.slabrec"
    writer = fmt.RecordWriter(path, "s1")
    big = [LogLine(t=float(i), text="x" * 100) for i in range(100)]
    writer.append([(fmt.META, 0.0, codec.encode({"session_id": "s1"})), (fmt.EVENTS, 0.0, codec.encode(big))])
    writer.close()
    image = fmt.FileImage(path)
    assert image.refs[1].flags & fmt.FLAG_ZLIB
    assert codec.decode(image, image.refs[1]).events == big


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
    assert s.samples.window().t == full.samples.window().t  # the END record was the torn one


@pytest.mark.parametrize("content, words", [
    (b"", "not a slabscope recording"),
    (b"PK\x03\x04 zip file here" * 3, "bad magic"),
    (b"SLABSC", "truncated"),
    (fmt.FILE_HEADER.pack(fmt.MAGIC, 99, 0), "format v99 is not supported"),
    (fmt.FILE_HEADER.pack(fmt.MAGIC, 1, 0), "no metadata"),
    (fmt.FILE_HEADER.pack(fmt.MAGIC, 2, 0), "no metadata"),
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
        Session.open(path, strict=True)
    with pytest.warns(RecordingDamage, match=f"corrupt record at byte {ref.offset - fmt.RECORD_HEADER.size}"):
        s = Session.open(path)
    assert s.records_read == 3 and not s.complete  # the three records before it, nothing after


def _records(path) -> tuple[bytes, list[bytes]]:
    """(file header, every record's bytes) of a v2 file."""
    data = path.read_bytes()
    image = fmt.FileImage(path)
    starts = [ref.offset - fmt.RECORD_HEADER.size for ref in image.refs]
    ends = [ref.offset + ref.length for ref in image.refs]
    return data[:fmt.FILE_HEADER.size], [data[a:b] for a, b in zip(starts, ends)]


@pytest.mark.parametrize("damage, words, kept", [
    (lambda recs: recs[:5] + [recs[4]] + recs[5:], "out of sequence", 5),   # a duplicated record
    (lambda recs: recs[:4] + [recs[5], recs[4]] + recs[6:], "out of sequence", 4),  # two records swapped
    (lambda recs: recs[:4] + recs[5:], "out of sequence", 4),  # a record missing from the middle
])
def test_duplicated_reordered_or_missing_records_are_detected(tmp_path, damage, words, kept):
    path = tmp_path / "s.slabrec"
    write_synthetic(path, num_batches=10)
    header, records = _records(path)
    bad = tmp_path / "bad.slabrec"
    bad.write_bytes(header + b"".join(damage(records)))
    with pytest.raises(RecordingError, match=words) as info:
        Session.open(bad, strict=True)
    assert "\n" not in str(info.value)
    with pytest.warns(RecordingDamage, match=words):
        s = Session.open(bad)
    assert s.records_read == kept and not s.complete and words in str(s.damage)


def test_records_of_another_session_are_detected(tmp_path):
    a, b = tmp_path / "a.slabrec", tmp_path / "b.slabrec"
    write_synthetic(a, num_batches=10)
    write_synthetic(b, num_batches=10)
    header, ours = _records(a)
    _, theirs = _records(b)
    spliced = tmp_path / "spliced.slabrec"
    spliced.write_bytes(header + b"".join(ours[:6] + theirs[6:]))  # sequence numbers fit, the session does not
    with pytest.raises(RecordingError, match="belongs to another session"):
        Session.open(spliced, strict=True)
    with pytest.warns(RecordingDamage, match="belongs to another session"):
        assert Session.open(spliced).records_read == 6


def _file_with(tmp_path, kind: int, payload: bytes):
    path = tmp_path / "crafted.slabrec"
    writer = fmt.RecordWriter(path, "s1")
    writer.append([(fmt.META, 0.0, codec.encode({"session_id": "s1", "t_start": 0.0})), (kind, 0.0, payload)])
    writer.close()
    return path


@pytest.mark.parametrize("kind, payload, words", [
    (fmt.SAMPLES, {"columns": {"t": ["lots"]}}, "malformed samples record"),
    (fmt.SAMPLES, {"columns": {name: [1] for name in Sample.__struct_fields__ if name != "rss"}}, "['rss'] missing"),
    (fmt.SAMPLES, {"columns": {name: [float("nan")] for name in Sample.__struct_fields__}}, "not finite"),
    (fmt.EVENTS, [{"kind": "step", "t": 0.0, "phase": "x", "type": "decode"}], "missing required field"),
    (fmt.OPS, {"first": 0, "t": [0.0], "ops": [{"op": "teleport", "seq": 1}]}, "malformed ops record"),
    (fmt.OPS, {"first": 0, "t": [], "ops": [{"op": "release", "seq": 1}]}, "1 ops with 0 times"),
    (fmt.END, {"t": "soon", "summary": {}}, "malformed end record"),
    (fmt.META, ["not", "a", "dict"], "malformed meta record"),
])
def test_malformed_content_is_one_recording_error(tmp_path, kind, payload, words):
    """CRC-valid records with content of the wrong shape: one typed decode, one line, at open (the op log, decoded
    on first use, then)."""
    if kind == fmt.META:
        path = tmp_path / "crafted.slabrec"
        writer = fmt.RecordWriter(path, "s1")
        writer.append([(fmt.META, 0.0, codec.encode(payload))])
        writer.close()
    else:
        path = _file_with(tmp_path, kind, codec.encode(payload))
    with pytest.raises(RecordingError) as info:
        Session.open(path).all_ops()
    assert words in str(info.value) and "\n" not in str(info.value)


def test_event_kinds_of_a_newer_slabscope_are_skipped_and_counted(tmp_path):
    payload = codec.encode([{"kind": "log", "t": 1.0, "text": "kept"}, {"kind": "hologram", "t": 2.0, "x": 1},
                            {"kind": "hologram", "t": 3.0}])
    session = Session.open(_file_with(tmp_path, fmt.EVENTS, payload))
    assert [e.text for e in session.events_of(LogLine)] == ["kept"]
    assert session.skipped_events == {"hologram": 2}
