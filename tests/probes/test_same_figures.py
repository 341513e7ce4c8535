"""One recording, every surface, the same value for each figure (issue 27 item 1).

For a pool session and its dense baseline, each figure ``probes.figures`` defines (footprint, footprint ratio, busy
and decode tok/s, gather runs mean/max, declines, slabs, probe cost) is read back from every surface that prints it:
the TUI (the Sessions table, the Memory ratio line, the Gather and Fused headers), ``compare`` (table and
``--json``), ``whatif``, ``report`` (Markdown), ``export`` (Perfetto and Chrome: the "figures" track) and the
Prometheus metrics (the exposition parsed by ``prometheus_client``). Each must print what the definition prints.

The recordings: the shipped H200 burst (measured gather runs and decisions, slabs in the samples), the shipped CPU
churn (a v1 recording: gather runs from its op log, slabs from snapshots, no decisions) and a recording made here
by the real writer whose fused decisions decline for a while, in two phases (the per-phase rows are checked too).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from same_figures_helpers import (FIGURES, chrome_figures, compare_table, from_export_args, from_json, from_metrics,
                                  from_report, from_table, from_whatif, perfetto_figures, record_with_declines,
                                  reference)

from app.cli import main as cli_main
from probes import figures
from probes.events import FusedChange, GatherRuns
from probes.replay import Session

ROOT = Path(__file__).resolve().parents[2] / "assets" / "recordings"
PAIRS = {"h200-burst": (ROOT / "gpu" / "distinct_burst-slab.slabrec", ROOT / "gpu" / "distinct_burst-dense.slabrec"),
         "cpu-churn-v1": (ROOT / "sample-churn-slab.slabrec", ROOT / "sample-churn-dense.slabrec")}


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    path = tmp_path_factory.mktemp("same") / "scripted-slab.slabrec"
    record_with_declines(path)
    return path, PAIRS["cpu-churn-v1"][1]


@pytest.fixture(params=[*PAIRS, "scripted-declines"])
def pair(request, scripted):
    return scripted if request.param == "scripted-declines" else PAIRS[request.param]


def _cli(argv: list[str], capsys) -> str:
    code = cli_main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def _tui(slab: Session, dense: Session) -> dict[str, dict[str, str]]:
    """What the TUI prints over the whole run (cursor None: following to the end)."""
    from app.tui.data import SessionSet, ViewState
    from app.tui.views.fused import decisions_at, fused_summary
    from app.tui.views.gather import gather_picture
    from app.tui.views.memory_header import verdict_line
    from app.tui.views.sessions import COMPARE_COLUMNS, compare_rows

    sessions = SessionSet()
    for view in (slab, dense):
        sessions.add(view)
    frame = ViewState(sessions, cursor=None)
    named = {"footprint": COMPARE_COLUMNS[1], "ratio": COMPARE_COLUMNS[3], "busy": COMPARE_COLUMNS[4],
             "decode": COMPARE_COLUMNS[5], "slabs": COMPARE_COLUMNS[6], "runs": COMPARE_COLUMNS[8],
             "declines": COMPARE_COLUMNS[9], "probe": COMPARE_COLUMNS[10]}
    out = {}
    for row in compare_rows(frame):
        cells = dict(zip(COMPARE_COLUMNS, (str(cell) for cell in row)))
        out[cells["track"]] = {figure: cells[column] for figure, column in named.items()}
    line = verdict_line(frame).plain
    out["memory line"] = {"ratio": re.search(r"([\d.]+x) \(gate", line).group(1),
                          **{f"busy {label}": value for label, value in re.findall(r"(\S+) ([\d,.]+|-)", line.split(
                              figures.LABELS["tok_s:busy"], 1)[1])}}
    gather = gather_picture(slab, 0.0, None).text.plain
    out["gather header"] = {"runs": re.search(r"up to here (\S+)", gather).group(1)}
    fused = fused_summary(slab, decisions_at(slab, slab.snapshot_at(None), None), None).plain
    match = re.search(r"declines:? (\S+)", fused)
    out["fused header"] = {"declines": match.group(1)}
    return out


# what each surface prints (a reader that found nothing would pass vacuously: its figures must all be there)
PRINTS = {"compare table": {"footprint", "ratio", "busy", "decode", "runs", "declines", "slabs"},
          "compare --json": {"footprint", "ratio", "busy", "decode", "runs", "declines", "slabs"},
          "report": {"footprint", "ratio", "busy", "decode", "runs", "declines", "slabs", "probe"},
          "whatif": {"footprint", "runs", "slabs"},
          "export chrome": {"footprint", "busy", "decode", "runs", "declines", "slabs", "probe"},
          "export perfetto": {"footprint", "busy", "decode", "runs", "declines", "slabs", "probe"},
          "metrics": {"footprint", "busy", "decode"},
          "TUI sessions": {"ratio", "busy", "decode", "runs", "declines", "slabs", "probe"},
          "TUI memory line": {"ratio"}, "TUI gather header": {"runs"}, "TUI fused header": {"declines"}}


def _same(surface: str, got: dict[str, str], want: dict[str, str], also: set[str] = frozenset()) -> list[str]:
    """Problems of ``got`` against ``want``; every figure the surface prints (``PRINTS``, and ``also``) must be
    there."""
    missing = (PRINTS[surface.split(" [")[0]] | also) - set(got)
    assert not missing, f"{surface} printed no {sorted(missing)}: {got}"
    return [f"{surface}: {figure} printed {got[figure]!r}, defined {want[figure]!r}"
            for figure in FIGURES if figure in got and got[figure] != want[figure]]


def _human_matches(text: str, value: float | None) -> bool:
    """A TUI byte cell (``pool.units.format_bytes``) is ``value`` to its printed precision."""
    if value is None:
        return text == "-"
    number, unit = text.split()
    scale = 1024 ** ("B", "KiB", "MiB", "GiB", "TiB").index(unit)
    decimals = len(number.partition(".")[2])
    return abs(float(number) * scale - value) <= 0.5 * 10 ** -max(decimals, 0) * scale + 1e-9


def test_every_surface_prints_the_same_figures(pair, tmp_path, capsys):
    slab_path, dense_path = (str(p) for p in pair)
    slab, dense = Session.open(slab_path, label="slab"), Session.open(dense_path, label="dense")
    want = {"slab": reference(slab, dense), "dense": reference(dense, None)}
    problems: list[str] = []

    table = compare_table(_cli(["compare", slab_path, dense_path], capsys))
    data = json.loads(_cli(["compare", slab_path, dense_path, "--json"], capsys))
    report_dir = tmp_path / "report"
    _cli(["report", slab_path, dense_path, "--out", str(report_dir)], capsys)
    report = from_report((report_dir / "report.md").read_text())
    for name in ("slab", "dense"):
        problems += _same(f"compare table [{name}]", from_table(table)[name], want[name])
        problems += _same(f"compare --json [{name}]", from_json(data)[name], want[name])
        problems += _same(f"report [{name}]", report[name], want[name])

    problems += _same("whatif", from_whatif(_cli(["whatif", slab_path], capsys)), want["slab"])

    chrome, perfetto = tmp_path / "t.json", tmp_path / "t.pftrace"
    _cli(["export", slab_path, dense_path, "--format", "chrome", "--out", str(chrome)], capsys)
    _cli(["export", slab_path, dense_path, "--format", "perfetto", "--out", str(perfetto)], capsys)
    for surface, found in (("export chrome", chrome_figures(chrome)), ("export perfetto", perfetto_figures(perfetto))):
        assert len(found) == 2, found
        for process, got in from_export_args(found).items():
            name = "slab" if process.startswith("slab") else "dense"
            problems += _same(f"{surface} [{process}]", got, want[name])

    from prometheus_client import CollectorRegistry, generate_latest

    from probes.prometheus import RunMetrics, observe_session

    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    observe_session(metrics, slab, "slab")
    observe_session(metrics, dense, "dense")
    for name, got in from_metrics(generate_latest(registry).decode()).items():
        view = slab if name == "slab" else dense
        live = {"runs"} if view.events_of(GatherRuns) else set()  # the events a live run streams
        live |= {"declines"} if view.events_of(FusedChange) else set()
        live |= {"probe"} if want[name]["probe"] != "-" else set()
        problems += _same(f"metrics [{name}]", got, want[name], also=live)

    tui = _tui(slab, dense)
    for name in ("slab", "dense"):
        row = dict(tui[name])
        footprint = row.pop("footprint")
        if not _human_matches(footprint, figures.peak_footprint(slab if name == "slab" else dense)):
            problems.append(f"TUI sessions [{name}]: footprint printed {footprint!r}, defined {want[name]['footprint']} MiB")
        problems += _same(f"TUI sessions [{name}]", row, want[name])
    problems += _same("TUI memory line", tui["memory line"], want["slab"])
    for label in ("slab", "dense"):
        busy = tui["memory line"][f"busy {label}"]
        if busy != want[label]["busy"]:
            problems.append(f"TUI memory line: busy tok/s of {label} printed {busy!r}, defined {want[label]['busy']!r}")
    problems += _same("TUI gather header", tui["gather header"], want["slab"])
    problems += _same("TUI fused header", tui["fused header"], want["slab"])
    assert not problems, "\n".join(problems)


def test_per_phase_rows_are_the_figures_over_each_phase(scripted, capsys):
    """compare's per-phase rows are the definitions over each phase's span (the scripted run has two phases)."""
    slab_path, dense_path = (str(p) for p in scripted)
    slab = Session.open(slab_path)
    table = compare_table(_cli(["compare", slab_path, dense_path], capsys))
    phases = [span for span in slab.phases()]
    assert [p.name for p in phases] == ["warm", "churn"]
    for span in phases:
        row = table[("slab", span.name)]
        t0, t1 = span.start, span.end
        assert row[figures.LABELS["tok_s:busy"]] == figures.format_tok_s(figures.tok_s(slab, "busy", t0, t1))
        assert row[figures.LABELS["gather_runs"]] == figures.format_runs(figures.gather_runs(slab, t0, t1))
        assert row[figures.LABELS["declines"]] == figures.format_declines(figures.declines(slab, t0, t1))
        assert row[figures.LABELS["slabs"]] == figures.format_slabs(figures.slab_count(slab, t0, t1))
    warm = figures.declines(slab, phases[0].start, phases[0].end)
    assert warm.gather > 0 and "gather: compiling" in warm.by_class  # the recording declines while "compiling"
    assert figures.peak_footprint(slab) is not None
