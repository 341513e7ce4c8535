"""``slabscope serve`` and ``load`` command lines: bad flags are one line and exit 2 before anything starts; a port in
use is one line (exit 2) before the model loads; ``serve --tui`` starts its server with exactly the options it was
given; and the real terminal run (tmux): ``serve --tui`` followed while ``load`` drives it, quit leaves no process."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser
from app.commands.serve_tui import child_argv

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("argv,words", [
    (["serve", "--model", "nope"], "unknown model"),
    (["serve", "--port", "70000"], "a port is 0..65535"),
    (["serve", "--record-keep", "1"], "--record-keep must be at least 2"),
    (["serve", "--temperature", "3"], "temperature"),
    (["load", "--url", "ftp://x"], "is not an http(s)://host[:port] address"),
    (["load", "--scenario", "nope"], "unknown scenario"),
    (["load", "--set", "n=0"], "count must be >= 1"),
    (["load", "--tokenizer", "/nonexistent"], "cannot read a tokenizer"),
])
def test_a_bad_command_line_is_one_line_and_exit_2(cli, argv, words):
    code, out, err = cli(argv)
    assert code == 2 and len(err) == 1 and words in err[0], err


def test_a_port_in_use_is_one_line_before_the_model_loads(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "app", "serve", "--port", str(port), "--model",
                               "synthetic:tiny-llama"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and f"--port {port}: the port is in use on 127.0.0.1" in proc.stderr
    assert "loading" not in proc.stderr


def test_serve_tui_starts_the_server_with_the_options_it_was_given(tmp_path):
    argv = ["serve", "--tui", "--model", "synthetic:tiny-llama", "--backend", "dense", "--port", "0",
            "--no-prefix-cache", "--budget", "64", "--prefill-trim", "off", "--cache-limit", "1G", "--temperature",
            "0.5", "--record", str(tmp_path / "r")]
    args = build_parser().parse_args(argv)
    child = child_argv(args, tmp_path / "r", tmp_path / "log")
    assert child[:4] == [sys.executable, "-m", "app", "serve"] and "--tui" not in child
    again = build_parser().parse_args(child[3:])
    for name, value in vars(args).items():
        if name not in ("tui", "log", "func"):
            assert getattr(again, name) == value, name
    assert again.log == str(tmp_path / "log")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: the real-terminal check needs it")
def test_serve_tui_in_a_real_terminal_follows_the_requests_load_sends():
    proc = subprocess.run(["bash", str(HERE / "tmux_serve.sh")], capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "ok: 0 in flight, 12 done" in proc.stdout and proc.stdout.rstrip().endswith("ok: no process left")


@pytest.mark.slow
def test_a_front_killed_outright_takes_its_engine_with_it():
    """SIGKILL of the server (nothing can run in it): its engine worker sees its parent gone and exits."""
    import os
    import signal

    import psutil

    from .server_proc import serve

    server = serve("--model", "synthetic:tiny-llama")
    engine = psutil.Process(server.engine_pid)
    os.kill(server.pid, signal.SIGKILL)
    server.process.wait(10)
    gone, alive = psutil.wait_procs([engine], timeout=15)  # the parent watch polls every 0.25 s, waits 2 s
    assert not alive, "the engine worker outlived its server"
