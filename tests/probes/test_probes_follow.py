"""Following a recording while it is written (probes.follow.GrowingSession): every prefix the writer can leave (whole
records, a torn record) reads as that much of the session, growth is picked up record by record, and the grown
session answers exactly like the finished file opened at once, including pool snapshots rebuilt before and after
more ops arrived."""

from __future__ import annotations

from dataclasses import replace

import pytest

from probes import format as fmt
from probes.errors import RecordingError
from probes.follow import GrowingSession
from probes.replay import Session
from probes.synthetic import write_synthetic_session


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A 20 s synthetic pool session (samples, steps, ops, snapshots, keyframes with bookkeeping state, END)."""
    path = tmp_path_factory.mktemp("follow") / "whole.slabrec"
    write_synthetic_session(path, seconds=20.0, keyframe_interval_s=5.0)
    return path, path.read_bytes()


def record_ends(data: bytes) -> list[int]:
    """Byte offsets where each record of a v2 file ends."""
    ends, pos = [], fmt.FILE_HEADER.size
    while pos < len(data):
        length = fmt.RECORD_HEADER.unpack_from(data, pos)[3]
        pos += fmt.RECORD_HEADER.size + length
        ends.append(pos)
    return ends


def assert_same(grown: Session, whole: Session) -> None:
    assert grown.samples.window().t == whole.samples.window().t
    assert grown.samples.window().footprint == whole.samples.window().footprint
    assert [(type(e), e.t) for e in grown.events] == [(type(e), e.t) for e in whole.events]
    assert grown.snapshots == whole.snapshots
    assert [k.t for k in grown.keyframes] == [k.t for k in whole.keyframes]
    assert grown.all_ops() == whole.all_ops()
    assert grown.summary == whole.summary and grown.duration == whole.duration


def test_growth_record_by_record_and_torn_tails_reads_as_the_whole_file(written, tmp_path):
    path, data = written
    ends = record_ends(data)
    live = tmp_path / "live.slabrec"
    live.write_bytes(data[:ends[0]])  # the header and the META record: what a writer puts out first
    grown = GrowingSession.open(live)
    assert grown.growing and len(grown.samples) == 0
    counts = []
    for k, end in enumerate(ends[1:], start=1):
        torn = ends[k - 1] + (end - ends[k - 1]) // 2
        live.write_bytes(data[:torn])   # half a record: nothing new yet
        assert grown.refresh() == 0
        live.write_bytes(data[:end])
        assert grown.refresh() == 1
        counts.append((len(grown.samples), len(grown.all_ops())))  # the op log decoded as it grows
    whole = Session.open(path)
    assert_same(grown, whole)
    assert not grown.growing and grown.refresh() == 0
    assert counts == sorted(counts) and counts[0] < counts[-1]  # samples and ops arrived as the file grew


def test_snapshots_asked_for_before_more_ops_arrived_are_rebuilt_after(written, tmp_path):
    """A snapshot rebuilt at the end of what was known must not be served from the cache once more ops are known
    (the rebuilt-snapshot cache is keyed by the op records known)."""
    path, data = written
    ends = record_ends(data)
    live = tmp_path / "live.slabrec"
    live.write_bytes(data[:ends[len(ends) // 2]])
    grown = GrowingSession.open(live)
    whole = Session.open(path)
    late = whole.duration - 1.0
    early = grown.snapshot_at(late)  # the pool as far as the half file knows
    live.write_bytes(data)
    grown.refresh()
    assert early != whole.snapshot_at(late)
    for t in (0.5, 7.3, 12.0, late):
        assert grown.snapshot_at(t) == whole.snapshot_at(t)


def test_ops_read_without_a_new_snapshot_still_change_the_rebuilt_pool(written, tmp_path):
    """Cut right after an op record, before its batch's snapshot record: the pool at a late instant must include
    those ops, although no snapshot or keyframe was added (the cache must not serve the older rebuild)."""
    path, data = written
    ends = record_ends(data)
    kinds = [fmt.RECORD_HEADER.unpack_from(data, start)[1] for start in [fmt.FILE_HEADER.size, *ends[:-1]]]
    k = next(i for i in range(len(kinds) // 2, len(kinds)) if kinds[i] == fmt.OPS and kinds[i + 1] != fmt.OPS)
    live = tmp_path / "live.slabrec"
    live.write_bytes(data[:ends[k - 1]])
    grown = GrowingSession.open(live)
    late = Session.open(path).duration
    before = grown.snapshot_at(late)
    counts = (len(grown.snapshots), len(grown.keyframes))
    live.write_bytes(data[:ends[k]])
    assert grown.refresh() == 1 and (len(grown.snapshots), len(grown.keyframes)) == counts
    after = grown.snapshot_at(late)
    assert after != before and len(grown.all_ops()) > 0


def test_a_file_without_its_metadata_yet_is_a_one_line_error(written, tmp_path):
    _, data = written
    live = tmp_path / "new.slabrec"
    live.write_bytes(data[:fmt.FILE_HEADER.size])
    with pytest.raises(RecordingError, match="no metadata record"):
        GrowingSession.open(live)


def test_a_rewritten_file_is_an_error_and_changes_nothing(written, tmp_path):
    path, data = written
    ends = record_ends(data)
    live = tmp_path / "live.slabrec"
    live.write_bytes(data[:ends[5]])
    grown = GrowingSession.open(live)
    before = (len(grown.samples), len(grown.events), list(grown.snapshots), grown.size)
    other = tmp_path / "other.slabrec"
    write_synthetic_session(other, seconds=20.0, seed=1)  # another session: its records carry another tag
    live.write_bytes(data[:ends[5]] + other.read_bytes()[ends[5]:ends[8]])
    with pytest.raises(RecordingError):
        grown.refresh()
    assert (len(grown.samples), len(grown.events), list(grown.snapshots), grown.size) == before
    live.write_bytes(data[:ends[9]])  # the writer's own bytes after all: read on
    assert grown.refresh() == 4


def test_appended_records_get_the_opening_checks_and_a_refused_growth_changes_nothing(written, tmp_path):
    """The continuity checks of opening a file (time order per kind, records after END) hold across refreshes:
    a walk over appended bytes continues the state of the walk before it, and a refusal undoes it."""
    from tests.probes.recording_craft import build, parse

    path, data = written
    version, records = parse(data)
    samples = [i for i, r in enumerate(records) if r.kind == fmt.SAMPLES]
    cut = samples[3]  # the file up to (not including) the 4th SAMPLES record
    live = tmp_path / "live.slabrec"
    live.write_bytes(build(version, records[:cut]))
    grown = GrowingSession.open(live)
    before = (len(grown.samples), len(grown.events), grown.size)
    older = replace(records[cut], t=records[samples[0]].t, raw=None)  # numbered right, but older than the last
    live.write_bytes(build(version, records[:cut] + [older]))
    with pytest.raises(RecordingError, match="older than the previous one"):
        grown.refresh()
    assert (len(grown.samples), len(grown.events), grown.size) == before
    live.write_bytes(build(version, records))  # the writer's own bytes after all: read on, to the end
    grown.refresh()
    assert_same(grown, Session.open(path))
    live.write_bytes(build(version, records + [replace(records[samples[-1]], t=grown.duration)]))
    assert not grown.growing and grown.refresh() == 0  # ended: what is appended after END is never folded in
    assert_same(grown, Session.open(path))


def test_a_followed_file_growing_past_the_size_limit_is_refused_and_changes_nothing(written, tmp_path, monkeypatch):
    """The first read refuses a file over ``SLABSCOPE_MAX_RECORDING_MIB``; growth read it with a plain ``read()``,
    past any limit. Now growth reads through the same bounded read: over the limit it is a one-line error, and
    what was read stays as it was."""
    _, data = written
    ends = record_ends(data)
    live = tmp_path / "live.slabrec"
    live.write_bytes(data[:ends[5]])
    grown = GrowingSession.open(live)
    before = (len(grown.samples), len(grown.events), grown.size)
    live.write_bytes(data)
    monkeypatch.setattr(fmt.limits, "max_file_bytes", lambda: ends[5] + 1)
    with pytest.raises(RecordingError, match="over the .*-byte limit"):
        grown.refresh()
    assert (len(grown.samples), len(grown.events), grown.size) == before
    monkeypatch.undo()
    assert grown.refresh() == len(ends) - 6  # under the default limit it reads on


def test_appended_snapshot_summaries_going_back_in_op_order_are_refused_as_opening_refuses_them(written, tmp_path):
    """Opening refuses snapshot summaries out of time or op order; following sorted them by time and took them.
    Now a refresh checks them like opening does, before it folds in anything."""
    from tests.probes.recording_craft import build, edited, parse

    path, data = written
    version, records = parse(data)
    snaps = [i for i, r in enumerate(records) if r.kind == fmt.SNAPSHOTS]
    cut = snaps[2]
    live = tmp_path / "live.slabrec"
    live.write_bytes(build(version, records[:cut]))
    grown = GrowingSession.open(live)
    assert grown.snapshots and grown.snapshots[-1].op_index > 0
    before = (len(grown.samples), len(grown.events), list(grown.snapshots))
    backwards = edited(records[cut], [dict(item, op_index=0) for item in records[cut].payload])
    live.write_bytes(build(version, records[:cut] + [backwards] + records[cut + 1:cut + 4]))
    with pytest.raises(RecordingError, match="snapshot summaries out of time or op order"):
        grown.refresh()
    assert (len(grown.samples), len(grown.events), list(grown.snapshots)) == before
    with pytest.raises(RecordingError, match="out of time or op order"):
        Session.open(live)  # opening says the same of the same bytes
