"""Hostile recordings from issue 12, one test each: CRC-valid but wrong files are refused or read up to the damage
with a one-line warning (never a silent change), malformed content is one ``RecordingError`` line in every tool,
and nothing a file says makes a reader block, read or inflate without bound, or replay without bound."""

from __future__ import annotations

import copy
import math
import re
import warnings
import zlib
from pathlib import Path

import pytest

from recording_craft import build, edited, first, parse, record_bytes
from recording_fuzz import make_special

from app.cli import main as cli_main
from probes import format as fmt
from probes import limits
from probes.compare import compare_sessions
from probes.errors import RecordingDamage, RecordingError, ReplayError
from probes.migrate import migrate
from probes.replay import Session
from probes.synthetic import write_synthetic_session
from probes.whatif import mismatches_with_recording, run_whatif

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "recordings"
CHURN_V1 = SHIPPED / "sample-churn-slab.slabrec"
DENSE_V1 = SHIPPED / "sample-churn-dense.slabrec"


@pytest.fixture(scope="module")
def churn(tmp_path_factory):
    """The shipped churn recording as v1 (as shipped) and v3 (migrated), and the dense one of each format."""
    folder = tmp_path_factory.mktemp("churn")
    migrate(CHURN_V1, folder / "slab-v3.slabrec")
    migrate(DENSE_V1, folder / "dense-v3.slabrec")
    return {"v1": (CHURN_V1, DENSE_V1), "v3": (folder / "slab-v3.slabrec", folder / "dense-v3.slabrec")}


def _open(path, **kw) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordingDamage)
        return Session.open(path, **kw)


def _write(tmp_path, name: str, blob: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(blob)
    return path


def _prefix(tmp_path, path: Path, kept: int) -> Session:
    """The original file cut after its first ``kept`` records (what a damaged copy must read as)."""
    blob = path.read_bytes()
    image = fmt.FileImage(path)
    last = image.refs[kept - 1]
    return _open(_write(tmp_path, f"prefix-{kept}.slabrec", blob[:last.offset + last.length]))


def _rows(session) -> list:
    return compare_sessions([session])


def _one_line_error(capsys, argv: list[str], code: int = 2) -> str:
    assert cli_main(argv) == code
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


# ---- silent corruption ------------------------------------------------------------------------------------------
def test_duplicated_events_record_no_longer_raises_tok_s(tmp_path, capsys):
    """Duplicating EVENTS record 19 of the shipped v1 churn recording raised the churn phase's tok/s from 70.7 to
    79.7 with no warning. Now: the duplicate is found (identical to the record before it), the file is read up to
    it, and compare warns and shows exactly what the intact part holds."""
    version, recs = parse(CHURN_V1.read_bytes())
    assert recs[19].kind == fmt.EVENTS
    path = _write(tmp_path, "dup.slabrec", build(version, recs[:20] + [recs[19]] + recs[20:]))
    with pytest.warns(RecordingDamage, match="duplicates the one at byte"):
        session = Session.open(path)
    assert not session.complete and session.status == "damaged"
    assert _rows(session) == _rows(_prefix(tmp_path, CHURN_V1, 20))  # nothing counted twice
    with pytest.raises(RecordingError, match="duplicates"):
        Session.open(path, strict=True)
    assert cli_main(["compare", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "duplicates the one at byte" in err and "figures cover the" in err


@pytest.mark.parametrize("version", ["v1", "v3"])
def test_another_sessions_records_appended_are_not_mixed_in(churn, tmp_path, version):
    slab, dense = churn[version]
    path = _write(tmp_path, "mixed.slabrec", slab.read_bytes() + dense.read_bytes()[fmt.FILE_HEADER.size:])
    session = _open(path)
    words = "belongs to another session" if version == "v3" else "follows the end record"
    assert words in str(session.damage) and f"byte {slab.stat().st_size}" in str(session.damage)
    assert not session.complete  # was True: the other session's records read as this one's
    intact = _open(slab)
    assert session.samples.window().t == intact.samples.window().t and session.events == intact.events


@pytest.mark.parametrize("version", ["v1", "v3"])
def test_reversed_records_are_refused_and_reordered_ones_cut(churn, tmp_path, version):
    """Reversed records made ``snapshot_at`` return None silently. Now reversing everything after the metadata
    leaves nothing readable (a one-line error), and two swapped records end the readable prefix."""
    slab, _ = churn[version]
    v, recs = parse(slab.read_bytes())
    header = fmt.RECORD_HEADER if v >= 2 else fmt.RECORD_HEADER_V1
    raw = [record_bytes(v, r) for r in recs]
    reversed_path = _write(tmp_path, "rev.slabrec", slab.read_bytes()[:fmt.FILE_HEADER.size] + raw[0] +
                           b"".join(raw[1:][::-1]))
    with pytest.raises(RecordingError, match="nothing readable after the metadata record"):
        _open(reversed_path)
    i, j = 13, 22  # two SAMPLES records
    assert recs[i].kind == recs[j].kind == fmt.SAMPLES
    swapped = raw[:i] + [raw[j]] + raw[i + 1:j] + [raw[i]] + raw[j + 1:]
    session = _open(_write(tmp_path, "swap.slabrec", slab.read_bytes()[:fmt.FILE_HEADER.size] + b"".join(swapped)))
    assert session.damage is not None and not session.complete
    kept = session.records_read
    # v2: at the moved record (its number); v1: at the next SAMPLES record, older than the moved one (which v1
    # cannot tell from an intact record: it stays in the prefix; docs/recording-format.md)
    assert kept == (i if v >= 2 else next(k for k in range(i + 1, len(recs)) if recs[k].kind == fmt.SAMPLES))
    assert session.damage.offset == fmt.FILE_HEADER.size + sum(map(len, swapped[:kept]))
    assert header.size < session.damage.unread


@pytest.mark.parametrize("version", ["v1", "v3"])
def test_end_time_1e300_is_refused(churn, tmp_path, version):
    """END t=1e300 made the session 1e300 s long (every "all" row's tok/s 0.0)."""
    v, recs = parse(churn[version][0].read_bytes())
    end = first(recs, fmt.END)
    in_payload = recs[:end] + [edited(recs[end], dict(recs[end].payload, t=1e300))]
    with pytest.raises(RecordingError, match="the end record: time 1e\\+300 s is outside"):
        _open(_write(tmp_path, "end.slabrec", build(v, in_payload)))
    in_header = recs[:end] + [edited(recs[end], dict(recs[end].payload, t=1e300), t=1e300)]
    session = _open(_write(tmp_path, "end2.slabrec", build(v, in_header)))
    assert "time 1e+300 s is outside" in str(session.damage) and session.duration < 20


@pytest.mark.parametrize("kind, where", [(fmt.EVENTS, lambda p: p[len(p) // 2]), (fmt.SNAPSHOTS, lambda p: p[0]),
                                          (fmt.KEYFRAME, lambda p: p), (fmt.OPS, None)])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_nan_or_infinite_times_are_refused(churn, tmp_path, kind, where, value):
    v, recs = parse(churn["v3"][0].read_bytes())
    i = next(k for k, r in enumerate(recs) if r.kind == kind and (kind != fmt.EVENTS or len(r.payload) > 2))
    payload = copy.deepcopy(recs[i].payload)  # a time in the middle of a record's events
    if kind == fmt.OPS:
        payload["t"][1] = value
    else:
        where(payload)["t"] = value
    path = _write(tmp_path, "nan.slabrec", build(v, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:]))
    with pytest.raises(RecordingError, match="not finite") as info:
        session = _open(path)
        session.all_ops()
        session.snapshot_at(recs[i].t)
    assert f"record at byte {fmt.FileImage(path).refs[i].offset}" in str(info.value)


@pytest.mark.parametrize("value", [-50, 10**15])
@pytest.mark.parametrize("kind", [fmt.SNAPSHOTS, fmt.KEYFRAME])
def test_negative_or_huge_op_index_is_refused(churn, tmp_path, kind, value):
    v, recs = parse(churn["v3"][0].read_bytes())
    i = first(recs, kind)
    payload = copy.deepcopy(recs[i].payload)
    (payload[0] if kind == fmt.SNAPSHOTS else payload)["op_index"] = value
    path = _write(tmp_path, "opi.slabrec", build(v, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:]))
    with pytest.raises(RecordingError, match=f"op_index {value} is outside"):
        _open(path).snapshot_at(recs[i].t)


def test_an_op_index_past_the_op_log_is_found_by_every_replay(churn, tmp_path):
    """The last snapshot claiming more ops than the log holds (still in order, so no check at open can see it)
    rebuilt an older pool silently, and what-if reported "251 differences"."""
    v, recs = parse(churn["v3"][0].read_bytes())
    i = max(k for k, r in enumerate(recs) if r.kind == fmt.SNAPSHOTS)
    payload = copy.deepcopy(recs[i].payload)
    payload[-1]["op_index"] += 1000
    recs = [r for k, r in enumerate(recs) if k != i and not (r.kind == fmt.KEYFRAME and r.t == payload[-1]["t"])]
    recs.insert(i, edited(parse(churn["v3"][0].read_bytes())[1][i], payload))  # keyframes agree with summaries
    path = _write(tmp_path, "past.slabrec", build(v, recs))
    session = _open(path)
    with pytest.raises(RecordingError, match="counts .* ops before it"):
        session.snapshot_at(payload[-1]["t"])
    with pytest.raises(RecordingError, match="does not match"):
        run_whatif(_open(path))


# ---- crashes and hangs ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["v1", "v3"])
def test_a_string_as_footprint_is_one_line_in_every_tool(churn, tmp_path, capsys, version):
    v, recs = parse(churn[version][0].read_bytes())
    i = first(recs, fmt.SAMPLES)
    payload = copy.deepcopy(recs[i].payload)
    if v >= 2:
        payload["columns"]["footprint"][0] = "lots"
    else:
        payload[0][1][0][payload[0][0].index("footprint")] = "lots"
    path = str(_write(tmp_path, "lots.slabrec", build(v, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:])))
    for argv in (["compare", path], ["report", path, "--out", str(tmp_path / "rep")], ["whatif", path],
                 ["tui", "--open", path]):
        if argv[0] == "tui":
            with pytest.raises(SystemExit, match="malformed samples record"):
                cli_main(argv)
        else:
            assert "malformed samples record at byte" in _one_line_error(capsys, argv)
    if v == 1:
        assert "malformed samples record" in _one_line_error(capsys, ["migrate", path, str(tmp_path / "m.slabrec")],
                                                             code=1)


def test_lazily_decoded_records_are_one_line_in_compare_report_and_whatif(churn, tmp_path, capsys):
    """A malformed OPS record is decoded only when the op log is first used (after open): compare and report
    printed a traceback from there. (The last one: compare rebuilds the pool at the end of every phase.)"""
    v, recs = parse(churn["v3"][0].read_bytes())
    i = max(k for k, r in enumerate(recs) if r.kind == fmt.OPS)
    payload = copy.deepcopy(recs[i].payload)
    payload["ops"][0] = {"op": "teleport", "seq": 1}
    path = str(_write(tmp_path, "ops.slabrec", build(v, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:])))
    Session.open(path)  # opens: ops are decoded on first use
    for argv in (["compare", path], ["report", path, "--out", str(tmp_path / "rep")], ["whatif", path]):
        assert "malformed ops record at byte" in _one_line_error(capsys, argv)


def test_an_op_asking_for_1e12_tokens_is_refused_before_acting(churn, tmp_path):
    """An op with 10**12 tokens made snapshot_at and whatif allocate until MemoryError (17 s, GBs)."""
    v, recs = parse(churn["v3"][0].read_bytes())
    i = first(recs, fmt.OPS)
    payload = copy.deepcopy(recs[i].payload)
    next(op for op in payload["ops"] if op["op"] == "prepare_write")["num_tokens"] = 10**12
    path = _write(tmp_path, "big.slabrec", build(v, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:]))
    with pytest.raises(RecordingError, match="the most a replay holds"):
        _open(path).snapshot_at(1.0)
    with pytest.raises(ReplayError, match="the most a replay holds"):
        run_whatif(_open(path))


@pytest.mark.parametrize("num_layers", [4097, 10**6])
def test_a_keyframe_book_past_the_layer_bound_is_refused(churn, tmp_path, num_layers):
    """The bound is MAX_LAYERS = 4096 layers: one more is refused by its count, before anything is built. (A
    million layers once made a replay build them all; its count is enough to refuse it, so the layer list here
    stays the recording's own and the file small.)"""
    assert limits.MAX_LAYERS == 4096
    v, recs = parse(churn["v3"][0].read_bytes())
    i = first(recs, fmt.KEYFRAME)
    payload = copy.deepcopy(recs[i].payload)
    payload["book_state"]["config"]["num_layers"] = num_layers
    path = _write(tmp_path, "layers.slabrec", build(v, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:]))
    with pytest.raises(RecordingError, match=f"book num_layers {num_layers} is outside \\[0, 4096\\]"):
        _open(path).snapshot_at(recs[i].t)


def test_a_keyframe_book_at_the_layer_bound_passes_the_count_check(churn, tmp_path):
    """4,096 layers pass the count (the keyframe is then refused because its snapshot lists fewer layers than the
    book says: a check after the count, which a million-layer book never reaches)."""
    v, recs = parse(churn["v3"][0].read_bytes())
    i = first(recs, fmt.KEYFRAME)
    payload = copy.deepcopy(recs[i].payload)
    payload["book_state"]["config"]["num_layers"] = 4096
    path = _write(tmp_path, "layers.slabrec", build(v, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:]))
    layers = len(payload["snapshot"]["layers"])
    assert layers < 4096
    with pytest.raises(RecordingError, match="the book and the snapshot disagree on the number of layers"):
        _open(path).snapshot_at(recs[i].t)


@pytest.mark.parametrize("version", ["v1", "v3"])
def test_a_zlib_bomb_stops_at_the_record_limit(churn, tmp_path, version):
    """A 1.1 MB record inflated to 3 GB; now inflation stops one byte past ``MAX_RECORD_BYTES``."""
    v, recs = parse(churn[version][0].read_bytes())
    bomb = zlib.compress(b"[" * (limits.MAX_RECORD_BYTES + 1), 9)
    i = first(recs, fmt.EVENTS)
    head = fmt.RECORD_HEADER if v >= 2 else fmt.RECORD_HEADER_V1
    fields = (fmt.RECORD_MARKER, fmt.EVENTS, fmt.FLAG_ZLIB, len(bomb)) + ((i, recs[0].tag) if v >= 2 else ())
    header = head.pack(*fields, recs[i].t, 0)[:-4]
    record = header + zlib.crc32(bomb, zlib.crc32(header)).to_bytes(4, "little") + bomb
    blob = build(v, recs[:i]) + record
    with pytest.raises(RecordingError, match=f"inflates past {limits.MAX_RECORD_BYTES:,} bytes"):
        _open(_write(tmp_path, "bomb.slabrec", blob))


@pytest.mark.parametrize("special", ["fifo", "dev_zero", "directory", "sparse", "oversize"])
def test_special_and_oversized_files_are_refused_before_reading(tmp_path, capsys, special):
    """A FIFO blocked every tool in open(); /dev/zero and a 1 GiB sparse file were read whole."""
    path = make_special(special, tmp_path)  # sparse: 1 GiB of holes; oversize: a header, then the limit + 1
    words = {"fifo": "not a regular file (a FIFO)", "dev_zero": "not a regular file (a character device)",
             "directory": "not a regular file (a directory)", "sparse": "bad magic bytes",
             "oversize": "over the"}[special]
    with pytest.raises(RecordingError, match=re.escape(words)):
        Session.open(path)
    for argv in (["compare", str(path)], ["whatif", str(path)]):
        expected = "no session files found" if special == "directory" and argv[0] == "compare" else words
        assert expected in _one_line_error(capsys, argv)  # compare reads a directory's recordings
    tui_words = "no recordings in" if special == "directory" else words  # the TUI opens a directory as a run
    with pytest.raises(SystemExit, match=re.escape(tui_words)):
        cli_main(["tui", "--open", str(path)])


# ---- robustness -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["v1", "v3"])
def test_a_damaged_length_mid_file_is_corruption_not_a_torn_tail(churn, tmp_path, version):
    """A mid-file record whose length field runs past the end was taken for a torn tail: every later record
    dropped silently."""
    slab, _ = churn[version]
    blob = bytearray(slab.read_bytes())
    ref = fmt.FileImage(slab).refs[50]
    header = fmt.RECORD_HEADER if version == "v3" else fmt.RECORD_HEADER_V1
    start = ref.offset - header.size
    blob[start + 4:start + 8] = (len(blob) * 2).to_bytes(4, "little")
    session = _open(_write(tmp_path, "len.slabrec", bytes(blob)))
    assert session.incomplete_tail_bytes == 0 and session.damage.offset == start
    assert "runs past the end of the file, and a valid record follows at byte" in str(session.damage)
    assert "corruption, not a torn tail" in str(session.damage)
    cut = _write(tmp_path, "torn.slabrec", slab.read_bytes()[:ref.offset + ref.length // 2])
    torn = _open(cut)  # a record cut short at the very end: a torn tail, as before
    assert torn.damage is None and torn.incomplete_tail_bytes > 0 and not torn.complete


@pytest.mark.parametrize("late_meta, message", [
    ({"distributed": {"rank": 5, "world_size": 2}}, "rank 5 of a world of 2"),
    ({"sample_hz": float("nan")}, "sample_hz nan is not finite"),
    ({"t_start": "soon"}, "Expected `float`"),
])
def test_metadata_added_later_is_checked_like_the_meta_record(churn, tmp_path, late_meta, message):
    """A ``MetaUpdate`` in an EVENTS record merges into the session's metadata when the file is replayed: a bad one
    raised a bare ValueError (or msgspec's ValidationError) out of ``Session.open``. Now it is the EVENTS record's
    one-line ``RecordingError``, like a bad META record."""
    v, recs = parse(churn["v3"][0].read_bytes())
    i = first(recs, fmt.EVENTS)
    update = {"kind": "meta", "meta": late_meta, "t": recs[i].t, "step": 0, "tokens": 0}
    path = _write(tmp_path, "late.slabrec", build(v, recs[:i] + [edited(recs[i], [update, *recs[i].payload])]
                                                  + recs[i + 1:]))
    with pytest.raises(RecordingError, match=message) as info:
        _open(path)
    assert f"malformed events record at byte {fmt.FileImage(path).refs[i].offset}" in str(info.value)


@pytest.mark.parametrize("version", ["v1", "v3"])
@pytest.mark.parametrize("how", ["zeroed tail", "appended zeros"])
def test_zeros_at_the_end_keep_the_valid_prefix(churn, tmp_path, version, how):
    """A zeroed tail, or zeros appended, made the whole file unreadable."""
    slab, _ = churn[version]
    blob = slab.read_bytes()
    damaged = blob[:-3000] + b"\0" * 3000 if how == "zeroed tail" else blob + b"\0" * 4096
    session = _open(_write(tmp_path, "zeros.slabrec", damaged))
    zeros_at = len(blob) - 3000 if how == "zeroed tail" else len(blob)
    assert f"the file ends in {len(damaged) - zeros_at:,} zero bytes from byte {zeros_at}" in str(session.damage)
    kept = session.records_read
    whole = [ref for ref in fmt.FileImage(slab).refs if ref.offset + ref.length <= zeros_at]  # before the zeros
    assert kept == len(whole) and not session.complete
    assert session.samples.window().t == _prefix(tmp_path, slab, kept).samples.window().t


def test_a_session_cut_before_its_first_keyframe_is_not_called_dense(tmp_path):
    """whatif called a pool session cut before its first keyframe "no pool (dense backend?)": the geometry is in
    META (v2), and in a v1 file's first snapshot summary."""
    path = tmp_path / "pool.slabrec"
    write_synthetic_session(path, seconds=2.0, num_layers=2, keyframe_interval_s=0.5)
    v, recs = parse(path.read_bytes())
    cut = _open(_write(tmp_path, "cut.slabrec", build(v, recs[:first(recs, fmt.KEYFRAME)])))
    assert not cut.keyframes and cut.geometry.num_layers == 2 and run_whatif(cut).points
    # every keyframe lost (the synthetic session keyframes its first instant): the whole op log still replays
    blind = _open(_write(tmp_path, "blind.slabrec", build(v, [r for r in recs if r.kind != fmt.KEYFRAME])))
    result = run_whatif(blind)
    assert result.summary()["ops_replayed"] > 50 and mismatches_with_recording(blind, result) == []
    v1, recs1 = parse(CHURN_V1.read_bytes())
    early = _open(_write(tmp_path, "cut1.slabrec", build(v1, recs1[:first(recs1, fmt.KEYFRAME)])))
    assert not early.keyframes and early.geometry.design == "slab" and run_whatif(early).points
    meta_only = _open(_write(tmp_path, "meta1.slabrec", build(v1, recs1[:first(recs1, fmt.SNAPSHOTS)])))
    with pytest.raises(ReplayError, match="ends before it recorded the pool's geometry"):
        run_whatif(meta_only)


def _as_v2_keyframe(payload: dict) -> dict:
    """A v3 keyframe payload written as format v2 wrote it: the row arrays in every layer's snapshot entry, the book's
    rows and tables once per layer, the row size inside its config, no caller-held blocks."""
    snap, state = dict(payload["snapshot"]), dict(payload["book_state"])
    owner, refcount = snap.pop("row_owner"), snap.pop("row_refcount")
    snap["layers"] = [dict(layer, row_owner=list(owner), row_refcount=list(refcount)) for layer in snap["layers"]]
    layers = state["config"]["num_layers"]
    rows = state.pop("rows")
    state["config"] = dict(state["config"], bytes_per_row=state.pop("bytes_per_row"))
    state.update(layers=[rows] * layers, loose=[],
                 seqs=[[owner_id, [table] * layers] for owner_id, table in state["seqs"]],
                 handles=[[owner_id, [table] * layers] for owner_id, table in state["handles"]])
    return dict(payload, snapshot=snap, book_state=state)


@pytest.fixture(scope="module")
def churn_v2(churn, tmp_path_factory):
    """The churn recording as format v2 wrote it (keyframes with the rows per layer): (path, records)."""
    _, recs = parse(churn["v3"][0].read_bytes())
    recs = [edited(r, _as_v2_keyframe(r.payload)) if r.kind == fmt.KEYFRAME else r for r in recs]
    path = tmp_path_factory.mktemp("v2") / "churn-v2.slabrec"
    path.write_bytes(build(2, recs))
    return path, recs


def test_a_v2_keyframe_reads_through_layer_0_as_the_pool_it_was(churn, churn_v2):
    path, recs = churn_v2
    old, new = Session.open(path), Session.open(churn["v3"][0])
    assert old.format_version == 2 and any(r.payload["book_state"]["seqs"] for r in recs if r.kind == fmt.KEYFRAME)
    assert [old.snapshot_at(s.t) for s in old.snapshots] == [new.snapshot_at(s.t) for s in new.snapshots]


@pytest.mark.parametrize("where", ["snapshot", "book_state", "table", "loose", "layer count"])
def test_a_v2_keyframe_whose_layers_differ_is_refused(churn_v2, tmp_path, where):
    """Format v2 stored the rows once per layer; they are read through layer 0 (probes/legacy.py). A keyframe whose
    other layers hold other rows (or caller-held blocks, the restore path that no longer exists) is not silently
    read as layer 0's pool: one RecordingError line, and the other records still open."""
    _, recs = churn_v2
    i = next(i for i, r in enumerate(recs) if r.kind == fmt.KEYFRAME and r.payload["book_state"]["seqs"])
    payload = copy.deepcopy(recs[i].payload)
    state = payload["book_state"]
    if where == "snapshot":
        payload["snapshot"]["layers"][1]["row_refcount"][0] += 1
    elif where == "book_state":
        state["layers"][1] = dict(state["layers"][1], capacity=state["layers"][1]["capacity"] + 4)
    elif where == "table":
        table = list(state["seqs"][0][1][1])
        table[2] += 1  # layer 1's table of the first sequence: another length
        state["seqs"][0][1][1] = table
    elif where == "loose":
        state["loose"] = [state["next_block_id"] - 1]
    else:
        state["layers"] = state["layers"][:1]
    path = _write(tmp_path, f"{where}.slabrec", build(2, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:]))
    session = _open(path)
    assert session.format_version == 2 and len(session.snapshots) == len(_open(churn_v2[0]).snapshots)
    with pytest.raises(RecordingError, match="malformed keyframe record at byte .*(than layer 0|one row space|"
                                             "layers for num_layers)") as info:
        session.snapshot_at(recs[i].t)
    assert "\n" not in str(info.value)


def test_a_keyframe_whose_layers_differ_in_capacity_is_refused(churn, tmp_path):
    """One row space: every layer of a full snapshot holds the same capacity, which its one set of row arrays
    covers. A v3 keyframe saying otherwise is one RecordingError line, not a pool drawn with rows it lacks."""
    v, recs = parse(churn["v3"][0].read_bytes())
    i = first(recs, fmt.KEYFRAME)
    payload = copy.deepcopy(recs[i].payload)
    layer = payload["snapshot"]["layers"][-1]
    layer["capacity_rows"] += 4
    path = _write(tmp_path, "capacity.slabrec", build(v, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:]))
    with pytest.raises(RecordingError, match="layers of different capacities") as info:
        _open(path).snapshot_at(recs[i].t)
    assert "\n" not in str(info.value)
