"""Gathered bytes and prefill routes travel: `run --json` summary, the recording (snapshot counters and
``prefill_route`` events), `compare` (table and --json) and the Prometheus metrics; older recordings still open
(their figures read "not recorded")."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from app.cli import main as cli_main
from pool.prefill_decision import ENV_VAR

RUN = ["run", "--model", "synthetic:tiny-llama", "--scenario", "distinct_burst", "--set", "n=1", "prompt_tokens=192",
       "gen_tokens=2", "--prefill-chunk", "32", "--block-size", "8", "--slab-blocks", "4", "--json"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """{route: (summary, recording path)} for the paged and the gather route."""
    out = tmp_path_factory.mktemp("routes")
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        for route, flag in (("paged", "1"), ("gather", "0")):
            patch.setenv(ENV_VAR, flag)
            path = out / f"{route}.slabrec"
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                assert cli_main([*RUN, "--record", str(path)]) == 0
            runs[route] = (json.loads(buffer.getvalue()), str(path))
    return runs


def test_run_json_reports_metered_bytes_and_routes(recorded):
    paged, gather = recorded["paged"][0], recorded["gather"][0]
    assert paged["prefill_attention"]["bytes_gathered_metered"] is True
    p, g = paged["pool"]["counters"], gather["pool"]["counters"]
    assert p["prefill_bytes_gathered"] == 0 < g["prefill_bytes_gathered"]  # measured: views, no copy
    assert g["prefill_bytes_gathered"] >= g["prefill_bytes_gathered_model"] > 0
    assert p["decode_bytes_gathered"] > 0  # CPU decode gathers (no fused kernel), metered too
    assert p["prefill_paged_decisions"] > 0 == p["prefill_gather_decisions"]
    assert "history read in place" in paged["prefill_attention"]["reasons"]


def test_recording_carries_counters_and_route_events(recorded):
    from probes.events import PrefillRouteChange
    from probes.replay import Session

    session = Session.open(recorded["paged"][1])
    counters = session.snapshots[-1].snapshot.counters
    assert counters.prefill_bytes_gathered == 0 and counters.prefill_paged_decisions > 0  # measured, not None
    reasons = [e.reason for e in session.events_of(PrefillRouteChange)]
    assert reasons[:2] == ["first chunk: own K/V only", "history read in place"]


def test_compare_shows_gathered_bytes_per_route(recorded, capsys):
    paths = [recorded["paged"][1], recorded["gather"][1]]
    assert cli_main(["compare", *paths, "--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["phase"] == "all"]
    assert rows[0]["prefill_bytes_gathered"] == 0 < rows[1]["prefill_bytes_gathered"]
    assert rows[0]["prefill_paged_rate"] == 1.0 and rows[1]["prefill_paged_rate"] == 0.0
    assert cli_main(["compare", *paths]) == 0
    assert "prefill gathered MiB" in capsys.readouterr().out


def test_metrics_expose_gathered_bytes(recorded):
    from prometheus_client import CollectorRegistry

    from probes.events import SnapshotTaken
    from probes.prometheus import RunMetrics
    from probes.replay import Session

    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    session = Session.open(recorded["gather"][1])
    last = session.snapshots[-1]
    metrics.observe(SnapshotTaken(t=last.t, snapshot=last.snapshot), "slab")
    value = registry.get_sample_value("slabscope_bytes_gathered",
                                      {"backend": "slab", "phase": "prefill", "figure": "measured"})
    assert value == last.snapshot.counters.prefill_bytes_gathered > 0


def test_older_recordings_read_not_recorded(capsys):
    import os

    from probes.replay import Session

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    shipped = os.path.join(root, "assets", "recordings", "sample-churn-slab.slabrec")
    counters = Session.open(shipped).snapshots[-1].snapshot.counters
    assert counters.prefill_bytes_gathered is None and counters.prefill_bytes_gathered_model is None
    assert counters.prefill_paged_decisions is None
    assert cli_main(["compare", shipped, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][-1]
    assert row["prefill_bytes_gathered"] is None and row["prefill_paged_rate"] is None
