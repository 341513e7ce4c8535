"""Every command that listens on a port (``web --port``, ``run``/``record --metrics-port``): a port out of range is a
usage error (exit 2, one line), a taken port one line naming it (exit 1), both before any server starts or any work
runs. Sockets bind on 127.0.0.1 only."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

import app.commands.web as web_cmd

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def taken_port():
    """A port some other socket listens on (127.0.0.1), for the test's duration."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def no_server(monkeypatch):
    """textual-serve's Server replaced by one that records being built: a check that comes too late shows."""
    import textual_serve.server

    built = []

    class Recorder:
        def __init__(self, *args, **kwargs):
            built.append(kwargs.get("port"))

        def serve(self):
            pass

    monkeypatch.setattr(textual_serve.server, "Server", Recorder)
    return built


@pytest.mark.parametrize("port, fragment", [("-1", "1..65535, got -1"), ("70000", "1..65535, got 70000"),
                                            ("0", "1..65535, got 0"), ("http", "'http' is not a port number")])
def test_web_port_out_of_range_is_a_usage_error(cli, no_server, port, fragment):
    code, out, err = cli(["web", "--port", port])
    assert code == 2 and out == "" and len(err) == 1 and fragment in err[0]
    assert no_server == []


def test_web_on_a_taken_port_is_one_line_naming_it_before_the_server_starts(cli, no_server, taken_port):
    code, out, err = cli(["web", "--host", "127.0.0.1", "--port", str(taken_port)])
    assert code == 1 and out == ""
    assert err == [f"slabscope web: --port {taken_port}: the port is in use on 127.0.0.1"]
    assert no_server == []


def test_web_on_a_free_port_serves_on_that_port(cli, no_server):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    code, _, err = cli(["web", "--host", "127.0.0.1", "--port", str(free)])
    assert code == 0 and no_server == [free]
    assert [line for line in err if line.endswith(f"at http://127.0.0.1:{free}")], err


def test_web_with_the_real_server_on_a_taken_port_exits_with_one_line(taken_port):
    """The real textual-serve, in its own process: no traceback from inside its event loop (bounded: the port is
    taken, so nothing can serve)."""
    result = subprocess.run([sys.executable, "-m", "app", "web", "--host", "127.0.0.1", "--port", str(taken_port)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and result.stderr.splitlines() == \
        [f"slabscope web: --port {taken_port}: the port is in use on 127.0.0.1"]


def test_an_unresolvable_host_is_a_usage_error(cli, no_server):
    code, _, err = cli(["web", "--host", "x.invalid", "--port", "8123"])
    assert code == 2 and len(err) == 1 and "cannot listen on 'x.invalid'" in err[0] and no_server == []


@pytest.mark.parametrize("command", ["run", "record"])
def test_metrics_port_taken_is_one_line_exit_1_before_any_work(cli, monkeypatch, taken_port, tmp_path, command):
    import app.commands.record as record_cmd
    import app.commands.run as run_cmd

    def no_work(*_args, **_kwargs):
        raise AssertionError("work started on a taken metrics port")

    monkeypatch.setattr(run_cmd, "_run_and_print", no_work)
    monkeypatch.setattr(record_cmd, "_record", no_work)
    extra = ["--out", str(tmp_path / "rec")] if command == "record" else []
    code, out, err = cli([command, "--model", "synthetic:tiny-llama", "--metrics-port", str(taken_port), *extra])
    assert code == 1 and out == ""
    assert err == [f"slabscope {command}: --metrics-port {taken_port}: the port is in use on 127.0.0.1"]


@pytest.mark.parametrize("port", ["-1", "70000"])
def test_metrics_port_out_of_range_is_a_usage_error(cli, port):
    code, _, err = cli(["record", "--out", "unused", "--metrics-port", port])
    assert code == 2 and len(err) == 1 and f"0..65535 (0: any free port), got {port}" in err[0]
