"""``slabscope run --metrics-port``: Prometheus metrics scraped during a real CPU run (the tiny model, a short
``churn``), then checked against the run's own summary; a port in use or a bad port is one line before any work."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from probes.figures import OTHER_REASON, REASON_CLASSES, reason_class

CLASSES = {name for name, _ in REASON_CLASSES} | {OTHER_REASON}

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _metrics(text: str) -> dict[str, float]:
    """{'name{labels}': value} of the exposition text's samples."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        return _metrics(response.read().decode())


def _lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)


def _wait_for(lines: queue.Queue, fragment: str, deadline: float, seen: list) -> str:
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        if fragment in line:
            return line
    raise AssertionError(f"{fragment!r} not printed; stderr so far: {''.join(seen)[-2000:]}")


def test_metrics_scraped_during_a_cpu_run_match_its_summary():
    # the tiny model: the metrics are the probes' figures whatever the model; 60 requests keep the run going for
    # a few seconds of steps, the window the first scrape must fall in (it polls every 0.2 s)
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", "--scenario", "churn", "--set", "n=60", "--model",
                             "synthetic:tiny-llama", "--json", "--metrics-port", "0", "--metrics-hold", "60"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stderr, stderr), daemon=True).start()
    seen: list = []
    try:
        deadline = time.monotonic() + 240
        url = _wait_for(stderr, "metrics: http://", deadline, seen).split("metrics: ", 1)[1].strip()
        during = {}
        while time.monotonic() < deadline:  # scrape while the run goes on: memory and at least one step seen
            during = _scrape(url)
            if during.get('slabscope_steps_total{backend="slab",type="decode"}', 0) >= 1:
                break
            time.sleep(0.2)
        assert during['slabscope_run_done{backend="slab"}'] == 0 and proc.poll() is None
        assert during['slabscope_footprint_bytes{backend="slab"}'] > 0
        assert 0 < during['slabscope_pool_live_bytes{backend="slab"}'] <= \
            during['slabscope_pool_reserved_bytes{backend="slab"}']
        assert during['slabscope_pool_slabs{backend="slab"}'] > 0
        _wait_for(stderr, "metrics: holding", deadline, seen)
        final = _scrape(url)
    finally:
        proc.terminate()
        stdout, _ = proc.communicate(timeout=30)
    summary = json.loads(stdout)
    assert final['slabscope_run_done{backend="slab"}'] == 1
    assert final['slabscope_tokens_total{backend="slab",type="decode"}'] == summary["decode_tokens"]
    assert final['slabscope_tokens_total{backend="slab",type="prefill"}'] == summary["prefill_tokens"]
    decisions = {key: value for key, value in final.items() if key.startswith("slabscope_attention_decisions_total")}
    reasons = summary["fused_decode"]["reasons"]
    assert sum(decisions.values()) == summary["fused_decode"]["fused"] + summary["fused_decode"]["gather"]
    by_class: dict[str, float] = {}  # the label is the reason's class: its text without numbers (a bounded set)
    for reason, count in reasons.items():
        by_class[reason_class(reason)] = by_class.get(reason_class(reason), 0) + count
    for name, count in by_class.items():
        assert sum(v for k, v in decisions.items() if f'reason="{name}"' in k) == count
    assert all(k.split('reason="')[1].split('"')[0] in CLASSES for k in decisions)
    assert final['slabscope_gather_runs_count{backend="slab"}'] > 0
    assert final['slabscope_step_seconds_total{backend="slab",type="decode"}'] > 0
    assert not any(key.endswith("_created") or "_created{" in key for key in final)
    assert not any("tokens_per_second" in key for key in final)
    assert 'slabscope_pool_fragmentation{backend="slab"}' in final


def _run_fails(*extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "run", "--scenario", "churn", *extra], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_port_in_use_is_one_line_before_any_work():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = _run_fails("--metrics-port", str(taken.getsockname()[1]))
    assert result.returncode == 1 and result.stdout == ""  # a runtime condition, named (tests/test_ports.py)
    assert len(result.stderr.splitlines()) == 1 and "the port is in use on 127.0.0.1" in result.stderr


@pytest.mark.parametrize("port, fragment", [("70000", "0..65535"), ("http", "not a port number"),
                                            ("-1", "0..65535")])
def test_bad_port_is_a_usage_error(port, fragment):
    result = _run_fails("--metrics-port", port)
    assert result.returncode == 2 and fragment in result.stderr and len(result.stderr.splitlines()) == 1
