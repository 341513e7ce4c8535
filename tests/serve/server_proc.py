"""A ``slabscope serve`` (or ``mlx_lm.server``) process for the tests: started on a free loopback port, waited for
through its own output (the "ready:" line) or ``/health``, stopped with SIGTERM and checked to leave no process."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"ready: (http://127\.0\.0\.1:\d+)/v1 .* engine pid (\d+)")


class Server:
    """One server process. ``url`` (no /v1), ``pid``, ``engine_pid`` (slabscope serve), ``lines`` (its output)."""

    def __init__(self, argv: list[str], env: dict | None = None) -> None:
        self.argv = argv
        self.process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self.url = ""
        self.engine_pid: int | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.output.append(line)
            self.lines.put(line)
        self.lines.put("")  # EOF

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout: float = 120.0) -> "Server":
        """Until slabscope serve prints its ready line (raises with its output when it exits or times out)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            match = READY.search(line)
            if match:
                self.url, self.engine_pid = match.group(1), int(match.group(2))
                return self
            if line == "" and self.process.poll() is not None:
                break
        raise AssertionError("server not ready:\n" + "\n".join(self.output[-30:]))

    def wait_healthy(self, url: str, timeout: float = 120.0) -> "Server":
        """Until ``url/health`` answers 200 (servers that print no ready line: mlx_lm.server)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "server exited:\n" + "\n".join(self.output[-30:])
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        self.url = url
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            try:
                self.process.wait(0.2)  # the server exiting ends the wait at once (the assert above says why)
            except subprocess.TimeoutExpired:
                pass
        raise AssertionError("server not healthy:\n" + "\n".join(self.output[-30:]))

    def state(self) -> dict:
        return get_json(self.url + "/slabscope/state")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait; returns the exit code. Asserts that no process it started is left (its engine worker,
        multiprocessing's resource tracker)."""
        tree = _tree(self.process.pid)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError("server did not stop on SIGTERM:\n" + "\n".join(self.output[-30:]))
        left = [p for p in tree if _alive(p)]
        deadline = time.monotonic() + 10
        while left and time.monotonic() < deadline:
            psutil.wait_procs(left, timeout=0.5)
            left = [p for p in tree if _alive(p)]
        assert not left, f"processes left behind: {[(p.pid, p.name()) for p in left]}"
        return code


def _tree(pid: int) -> list:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _alive(process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start_serve(*args: str, env: dict | None = None) -> Server:
    """``slabscope serve --port 0 --temperature 0`` with ``args``, started (``wait_ready`` waits for it)."""
    argv = [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", "0", "--temperature", "0",
            "--blas-threads", "1", *args]  # one BLAS thread: on a busy 2-core machine, 2.3x faster steps (measured)
    return Server(argv, env)


def serve(*args: str, env: dict | None = None) -> Server:
    """``start_serve(*args)``, ready."""
    return start_serve(*args, env=env).wait_ready()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 30.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def post_raw(url: str, data: bytes, timeout: float = 60.0) -> tuple[int, dict]:
    """POST ``data`` as is; (status, decoded JSON body) also for HTTP errors."""
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_state(server: Server, predicate, timeout: float = 60.0) -> dict:
    """Poll ``/slabscope/state`` (each call is answered by the engine between two steps) until ``predicate``."""
    deadline = time.monotonic() + timeout
    state = server.state()
    while not predicate(state):
        assert time.monotonic() < deadline, f"state never matched: {state}"
        state = server.state()
    return state


def wait_recorded(directory, predicate, timeout: float = 30.0):
    """The newest recording in ``directory`` once ``predicate(session)`` holds (the engine writes its recording
    every half second: an event is on disk within that)."""
    from probes.replay import Session

    deadline = time.monotonic() + timeout
    while True:
        files = sorted(Path(directory).glob("*.slabrec"))
        session = Session.open(files[-1]) if files else None
        if session is not None and predicate(session):
            return session
        assert time.monotonic() < deadline, "the recording never showed it"
        time.sleep(0.1)  # the writer's next flush (FILE_FLUSH_S) is what is awaited
