"""Impossible values are damage (issue 23, item 3): a CRC-valid record holding a figure no machine or run could
produce (``probes.bounds``) ends the valid prefix like a bad checksum, with the same one-line damage report, and
no figure (whatif, compare, report, export, the TUI) is computed from it. Crafted recordings
(``recording_craft``) edit one field of one record and keep every checksum valid."""

from __future__ import annotations

import copy
import json
import re
import warnings
from pathlib import Path

import pytest

from recording_craft import build, edited, first, parse

from app.cli import main as cli_main
from probes import format as fmt
from probes.compare import compare_sessions
from probes.errors import RecordingDamage, RecordingError  # ImpossibleRecord is a RecordingError
from probes.follow import GrowingSession
from probes.migrate import migrate
from probes.replay import Session

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "recordings"
U64_MAX = 2**64 - 1


@pytest.fixture(scope="module")
def churn(tmp_path_factory) -> Path:
    """The shipped churn recording (slab, CPU) as format v2."""
    path = tmp_path_factory.mktemp("churn") / "slab.slabrec"
    migrate(SHIPPED / "sample-churn-slab.slabrec", path)
    return path


def _open(path) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordingDamage)
        return Session.open(path)


def _record_start(path: Path, index: int) -> int:
    ref = fmt.FileImage(path).refs[index]
    return ref.offset - fmt.RECORD_HEADER.size


def _craft(churn: Path, tmp_path: Path, kind: int, edit, nth: int = 1, meta=None) -> tuple[Path, int, Path]:
    """(damaged file, index of the edited record, the original cut before that record): the ``nth`` record of
    ``kind`` edited in place by ``edit(payload)``; ``meta(payload)`` edits the META record too."""
    v, recs = parse(churn.read_bytes())
    i = [k for k, r in enumerate(recs) if r.kind == kind][nth]
    payload = copy.deepcopy(recs[i].payload)
    edit(payload)
    recs = recs[:i] + [edited(recs[i], payload)] + recs[i + 1:]
    if meta is not None:
        head = copy.deepcopy(recs[0].payload)
        meta(head)
        recs[0] = edited(recs[0], head)
    damaged = tmp_path / "damaged.slabrec"
    damaged.write_bytes(build(v, recs))
    prefix = tmp_path / "prefix.slabrec"
    prefix.write_bytes(build(v, recs[:i]))
    return damaged, i, prefix


def _sample(payload, field: str, value) -> None:
    payload["columns"][field][len(payload["columns"][field]) // 2] = value


def _layer(payload, field: str, value) -> None:
    payload[0]["snapshot"]["layers"][0][field] = value


def _step(payload, field: str, value) -> None:
    next(e for e in payload if e["kind"] == "step")[field] = value


CASES = {  # name: (record kind, edit, what the damage line says)
    "rss_other 2^64-1 (the issue's whatif case)": (fmt.SAMPLES, lambda p: _sample(p, "rss_other", U64_MAX),
                                                   "a sample's rss_other 18,446,744,073,709,551,615 bytes is beyond"),
    "negative pool_slabs": (fmt.SAMPLES, lambda p: _sample(p, "pool_slabs", -3),
                            "a sample's pool_slabs -3 is outside [0,"),
    "negative tokens in a sample": (fmt.SAMPLES, lambda p: _sample(p, "tokens", -1),
                                    "a sample's tokens -1 is outside [0,"),
    "negative footprint": (fmt.SAMPLES, lambda p: _sample(p, "footprint", -(2**40)),
                           "a sample's footprint -1,099,511,627,776 bytes is below 0"),
    "negative holes": (fmt.SNAPSHOTS, lambda p: _layer(p, "holes", -2), "negative row, hole or chunk count"),
    "more holes than free rows": (fmt.SNAPSHOTS, lambda p: _layer(p, "holes", 10**6),
                                  "more free rows, holes or chunks than rows"),
    "fragmentation 7": (fmt.SNAPSHOTS, lambda p: _layer(p, "fragmentation", 7.0), "fragmentation 7.0 is outside"),
    "negative tokens in a step": (fmt.EVENTS, lambda p: _step(p, "tokens", -5), "an event's step or tokens -5 is outside"),
    "a step's batch past the run limit": (fmt.EVENTS, lambda p: _step(p, "batch", 5000),
                                          "a step's batch 5,000 is outside [0, 4,096]"),
    "a negative step wall time": (fmt.EVENTS, lambda p: _step(p, "wall_s", -0.5), "a step's wall time -0.5 s"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_impossible_value_is_damage_and_the_figures_cover_the_prefix_before_it(churn, tmp_path, case):
    kind, edit, says = CASES[case]
    damaged, i, prefix = _craft(churn, tmp_path, kind, edit)
    with pytest.warns(RecordingDamage, match=re.escape(says)):
        session = Session.open(damaged)
    start = _record_start(damaged, i)
    assert session.damage.offset == start and session.records_read == i and not session.complete
    assert str(session.damage) == (f"{fmt.KIND_NAMES[kind]} record at byte {start} holds an impossible value "
                                   f"({session.damage.problem.split('(', 1)[1]}: "
                                   f"{damaged.stat().st_size - start:,} bytes from byte {start} not read")
    assert session.status == "damaged"
    before = _open(prefix)
    assert compare_sessions([session]) == compare_sessions([before])
    assert session.samples.window().t == before.samples.window().t
    assert session.snapshots == before.snapshots and session.events == before.events
    with pytest.raises(RecordingError, match=re.escape(says)):
        Session.open(damaged, strict=True)


def _figures(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli_main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_whatif_never_sizes_from_an_impossible_rss(churn, tmp_path, capsys):
    """At 5241d86 one sample's rss_other of 2^64-1 made whatif report 17,592,186,044,961 MiB and "fits? no" for
    every memory size."""
    damaged, _, prefix = _craft(churn, tmp_path, fmt.SAMPLES, CASES["rss_other 2^64-1 (the issue's whatif case)"][1])
    code, out, err = _figures(["whatif", str(damaged), "--memory", "8GiB"], capsys)
    assert code == 0 and "17,592,186" not in out
    assert err.count("\n") == 1 and "warning:" in err and "holds an impossible value (a sample's rss_other" in err
    _, out_prefix, _ = _figures(["whatif", str(prefix), "--memory", "8GiB"], capsys)
    assert out.replace(str(damaged), "X") == out_prefix.replace(str(prefix), "X")


@pytest.mark.parametrize("command", ["compare", "report", "export"])
def test_every_tool_reports_the_damage_and_uses_the_prefix(churn, tmp_path, capsys, command):
    damaged, _, prefix = _craft(churn, tmp_path, fmt.SAMPLES, CASES["negative pool_slabs"][1])
    outputs = {}
    for name, path in (("damaged", damaged), ("prefix", prefix)):
        out_path = tmp_path / f"{name}-{command}"
        argv = {"compare": ["compare", str(path), "--json"],
                "report": ["report", str(path), "--out", str(out_path)],
                "export": ["export", str(path), "--out", f"{out_path}.json"]}[command]
        code, out, err = _figures(argv, capsys)
        assert code == 0, err
        if name == "damaged":
            assert "holds an impossible value (a sample's pool_slabs -3" in err and err.count("\n") == 1
        outputs[name] = {"compare": lambda: out.replace(str(path), "X"),
                         "report": lambda: (out_path / "report.md").read_text().replace(str(path), "X"),
                         "export": lambda: Path(f"{out_path}.json").read_text().replace(path.name, "X")}[command]()
    if command == "report":  # the damaged file's report says so in its session table; the prefix has no END
        outputs = {k: re.sub(r"-{3,}", "---", re.sub(r" +", " ", v)) for k, v in outputs.items()}  # cell padding
        assert "| complete | NO (damaged file: samples record at byte" in outputs["damaged"]
        outputs = {k: "\n".join(line for line in v.splitlines() if not line.startswith("| complete |"))
                   for k, v in outputs.items()}
    assert outputs["damaged"] == outputs["prefix"]


def test_the_tuis_sessions_view_lists_the_damage(churn, tmp_path):
    from app.tui.sources import describe

    damaged, _, _ = _craft(churn, tmp_path, fmt.SNAPSHOTS, CASES["negative holes"][1])
    info = describe(damaged)
    assert not info.error and "holds an impossible value (a layer with a negative row" in info.damage


def test_beyond_the_memory_its_machine_had_is_damage(churn, tmp_path):
    """The bound is the RAM, swap and device memory the metadata records (a recording without them: 1 PiB)."""
    def ram(meta):
        meta["host_memory"] = {"ram_bytes": 32 * 2**30, "swap_bytes": 0}

    def footprint_64gib(payload):
        _sample(payload, "footprint", 64 * 2**30)

    damaged, i, _ = _craft(churn, tmp_path, fmt.SAMPLES, footprint_64gib, meta=ram)
    session = _open(damaged)
    assert session.records_read == i
    assert ("a sample's footprint 68,719,476,736 bytes is beyond 32 GiB, the 32 GiB of RAM, 0 B of swap its "
            "machine had") in str(session.damage)
    undamaged, _, _ = _craft(churn, tmp_path, fmt.SAMPLES, footprint_64gib)  # no host memory recorded: 1 PiB
    assert _open(undamaged).damage is None

    def device(meta):
        meta["host_memory"] = {"ram_bytes": 32 * 2**30, "swap_bytes": 16 * 2**30}
        meta["device_limits"] = {"memory_bytes": 32 * 2**30}

    on_gpu, _, _ = _craft(churn, tmp_path, fmt.SAMPLES, footprint_64gib, meta=device)
    assert _open(on_gpu).damage is None  # RAM + swap + device memory: 80 GiB


@pytest.mark.parametrize("block, value, says", [
    ("device_limits", {"memory_bytes": -1}, "metadata device_limits.memory_bytes -1 bytes is below 0"),
    ("device_limits", {"memory_bytes": 2**60}, "metadata device_limits.memory_bytes 1,152,921,504,606,846,976 bytes"),
    ("host_memory", {"ram_bytes": 2**60, "swap_bytes": 0}, "metadata host_memory.ram_bytes"),
    ("distributed", {"shard": {"kv_bytes_per_token": -8}}, "metadata distributed.shard.kv_bytes_per_token -8"),
])
def test_metadata_claiming_impossible_memory_is_refused(churn, tmp_path, block, value, says):
    """What the session's bounds come from is bounded itself (1 PiB); a rank's memory and shard figures too (its
    header line shows them)."""
    def edit(meta):
        meta[block] = value

    damaged, _, _ = _craft(churn, tmp_path, fmt.SAMPLES, lambda p: None, meta=edit)
    with pytest.raises(RecordingError, match=r"meta record at byte 16 holds an impossible value \(" + re.escape(says)):
        _open(damaged)


def test_an_impossible_figure_in_the_op_log_is_one_line_and_no_figure(churn, tmp_path, capsys):
    """Ops are decoded when first used (after the figures of the prefix were read): a copied op measuring -4096
    bytes is the op record's one-line error wherever the op log is read, never a bytes_copied figure."""
    def negative_copy(payload):
        payload["ops"].append({"op": "copied", "bytes": -4096, "cow_bytes": 0})
        payload["t"].append(payload["t"][-1])

    damaged, _, _ = _craft(churn, tmp_path, fmt.OPS, negative_copy, nth=3)
    session = _open(damaged)
    with pytest.raises(RecordingError, match="a copied op's bytes -4,096 bytes is below 0"):
        session.all_ops()
    code, out, err = _figures(["whatif", str(damaged)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "ops record at byte" in err


def test_a_followed_recording_stops_at_the_impossible_record(churn, tmp_path):
    """A live rank file read while it grows: the records before the impossible one are folded in, then it is
    damage (nothing after it is read)."""
    damaged, i, prefix = _craft(churn, tmp_path, fmt.SAMPLES, CASES["negative tokens in a sample"][1])
    blob = damaged.read_bytes()
    growing_path = tmp_path / "growing.slabrec"
    growing_path.write_bytes(blob[:_record_start(damaged, 3)])
    growing = GrowingSession.open(growing_path)
    growing_path.write_bytes(blob)
    growing.refresh()
    assert growing.damage is not None and growing.damage.offset == _record_start(damaged, i)
    assert growing.samples.window().t == _open(prefix).samples.window().t
    assert growing.refresh() == 0  # nothing past the damage


def test_the_shipped_and_fresh_recordings_are_within_their_bounds():
    """No false damage: every shipped recording (CPU, H200, two-rank NCCL) opens intact."""
    for path in sorted(SHIPPED.rglob("*.slabrec")):
        session = _open(path)
        assert session.damage is None, (path, session.damage)
        session.all_ops()


def test_the_run_limits_mirrored_in_the_bounds_are_the_run_limits():
    from app.workloads import limits as run_limits
    from probes import bounds

    assert bounds.MAX_CONCURRENCY == run_limits.MAX_CONCURRENCY
    assert bounds.MAX_REQUEST_TOKENS == run_limits.MAX_REQUEST_TOKENS
    assert bounds.MAX_PHASE_REQUESTS == run_limits.MAX_PHASE_REQUESTS


def test_migrate_refuses_a_v1_recording_holding_an_impossible_value(tmp_path, capsys):
    v, recs = parse((SHIPPED / "sample-churn-slab.slabrec").read_bytes())
    i = [k for k, r in enumerate(recs) if r.kind == fmt.SAMPLES][2]
    payload = copy.deepcopy(recs[i].payload)
    keys, rows = payload[0]
    rows[0][keys.index("footprint")] = -5
    damaged = tmp_path / "v1.slabrec"
    damaged.write_bytes(build(v, recs[:i] + [edited(recs[i], payload)] + recs[i + 1:]))
    code, out, err = _figures(["migrate", str(damaged), str(tmp_path / "v2.slabrec")], capsys)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "holds an impossible value (a sample's footprint -5 bytes is below 0)" in err
    assert "only intact recordings are migrated" in err and sorted(p.name for p in tmp_path.iterdir()) == ["v1.slabrec"]


@pytest.mark.parametrize("seq_id, damaged", [(-1, False), (0, False), (-2, True)])
def test_a_request_without_a_sequence_is_minus_one_and_nothing_below(seq_id, damaged):
    """A server's request cancelled while it waited ends with ``seq_id`` -1 (probes.events.RequestDone): a real
    value, not damage; -2 is."""
    from probes.bounds import FigureBounds, ImpossibleValue, check_event_figures
    from probes.events import RequestDone

    event = RequestDone(t=1.0, step=1, tokens=0, req_id=3, seq_id=seq_id, prompt_tokens=5, generated_tokens=0,
                        finish_reason="disconnected")
    if damaged:
        with pytest.raises(ImpossibleValue, match="sequence id -2"):
            check_event_figures([event], FigureBounds())
    else:
        check_event_figures([event], FigureBounds())
