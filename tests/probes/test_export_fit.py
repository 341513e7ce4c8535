"""Exports and metrics fit their tools (issue 27 item 7): what 5241d86 got wrong, each checked as the tool reads it.

Perfetto's UI sorted the protobuf's tracks by name (footprint sixth) and showed the Chrome JSON's ``\\u00b7`` escapes
verbatim; the metrics had a ``reason`` label per slab count ("fused cuda kernel (33 slabs)"), a ``device`` label
holding ``Device(gpu, 0)``, ``_created`` series beside every counter and a home-made ``tokens_per_second`` gauge."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.cli import main as cli_main
from probes import figures
from probes.replay import Session

ROOT = Path(__file__).resolve().parents[2] / "assets" / "recordings"
SLAB = ROOT / "gpu" / "distinct_burst-slab.slabrec"
COMPILING = ROOT / "gpu" / "nccl2" / "distinct_burst-slab-rank0.slabrec"  # 112 decisions declined "compiling"


def test_perfetto_lists_each_sessions_tracks_in_the_writers_order(tmp_path, capsys):
    protos = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    out = tmp_path / "t.pftrace"
    assert cli_main(["export", str(SLAB), "--format", "perfetto", "--out", str(out)]) == 0
    capsys.readouterr()
    descriptors = [p.track_descriptor for p in protos.Trace.FromString(out.read_bytes()).packet
                   if p.HasField("track_descriptor")]
    (process,) = [d for d in descriptors if d.HasField("process")]
    assert process.child_ordering == protos.TrackDescriptor.EXPLICIT
    children = [d for d in descriptors if d.parent_uuid == process.uuid]
    assert all(d.HasField("sibling_order_rank") for d in children)
    ordered = [d.name for d in sorted(children, key=lambda d: d.sibling_order_rank)]
    assert ordered[:4] == ["footprint (active+cache)", "MLX active", "MLX cache", "RSS"]
    assert ordered[-7:] == ["phases", "steps", "pool", "decisions", "errors", "events", "figures"]
    assert ordered != sorted(ordered)  # the intended order, not the name order the UI fell back to


def test_chrome_json_keeps_names_in_utf8(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert cli_main(["export", str(SLAB), "--format", "chrome", "--out", str(out)]) == 0
    capsys.readouterr()
    raw = out.read_bytes()
    assert "slab · distinct_burst".encode() in raw and b"\\u00b7" not in raw
    raw.decode("utf-8")  # a valid UTF-8 file


def _exposition(*paths_and_backends, openmetrics: bool = False) -> str:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

    from probes.prometheus import RunMetrics, observe_session

    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    for path, backend in paths_and_backends:
        observe_session(metrics, Session.open(path), backend)
    return (generate_openmetrics if openmetrics else generate_latest)(registry).decode()


def test_metrics_labels_are_bounded_and_series_are_the_conventions():
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
    from prometheus_client.parser import text_string_to_metric_families

    text = _exposition((COMPILING, "slab"), (ROOT / "gpu" / "distinct_burst-dense.slabrec", "dense"))
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    list(parse_openmetrics(_exposition((COMPILING, "slab"), openmetrics=True)))  # the strict parser accepts it too
    names = {s.name for s in samples}
    assert not [n for n in names if n.endswith("_created")] and "slabscope_tokens_per_second" not in names
    classes = {name for name, _ in figures.REASON_CLASSES} | {figures.OTHER_REASON}
    reasons = {s.labels["reason"]: s.value for s in samples if s.name == "slabscope_attention_decisions_total"}
    assert reasons == {"gather: compiling": 112.0, "fused": 784.0} and set(reasons) <= classes
    assert {s.labels["device"] for s in samples if s.name == "slabscope_run_info"} == {"gpu"}
    value = {(s.name, s.labels.get("backend"), s.labels.get("type")): s.value for s in samples}
    assert value[("slabscope_step_seconds_total", "slab", "decode")] > 0  # rate()-friendly: tokens / step seconds
    assert value[("slabscope_tokens_total", "slab", "decode")] == 128
    usage = value[("slabscope_kv_cache_usage_ratio", "slab", None)]
    last = Session.open(COMPILING).samples.window()
    assert 0 <= usage <= 1 and usage == last.pool_live[-1] / (last.pool_live[-1] + last.pool_free[-1])
    assert ("slabscope_kv_cache_usage_ratio", "dense", None) not in value  # no pool, no KV usage
    assert value[("slabscope_decode_batch", "slab", None)] == 4
    assert value[("slabscope_footprint_peak_bytes", "slab", None)] == Session.open(COMPILING).peak().value
    assert not any(re.search(r"\d", v) for s in samples for k, v in s.labels.items() if k in ("reason", "outcome"))


def test_request_metrics_api_for_a_serving_engine():
    """What ``slabscope serve`` calls: running/waiting gauges and one call per finished request (TTFT and time per
    output token histograms, prefix-cache queries and hits in tokens)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from probes.prometheus import RunMetrics

    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    metrics.set_requests("slab", running=3, waiting=5)
    metrics.observe_request_finished("slab", prompt_tokens=100, generation_tokens=20, cached_tokens=64, ttft_s=0.2,
                                     tpot_s=0.015)
    metrics.observe_request_finished("slab", prompt_tokens=50, generation_tokens=1, ttft_s=0.1, tpot_s=None)
    value = {(s.name, s.labels.get("le")): s.value
             for family in text_string_to_metric_families(generate_latest(registry).decode())
             for s in family.samples}
    assert value[("slabscope_requests_running", None)] == 3 and value[("slabscope_requests_waiting", None)] == 5
    assert value[("slabscope_requests_finished_total", None)] == 2
    assert value[("slabscope_request_ttft_seconds_count", None)] == 2
    assert value[("slabscope_request_ttft_seconds_sum", None)] == pytest.approx(0.3)
    assert value[("slabscope_request_time_per_output_token_seconds_count", None)] == 1  # one token: no TPOT
    assert value[("slabscope_request_time_per_output_token_seconds_bucket", "0.025")] == 1
    assert value[("slabscope_prefix_cache_queries_total", None)] == 150
    assert value[("slabscope_prefix_cache_hits_total", None)] == 64


@pytest.mark.parametrize("device, name", [("Device(gpu, 0)", "gpu"), ("Device(cpu, 0)", "cpu"), ({"type": "gpu"}, "gpu"),
                                          ("cpu", "cpu"), (None, "")])
def test_device_label_is_the_device_kind(device, name):
    from probes.prometheus import device_name

    assert device_name(device) == name
