"""``slabscope serve --tui``: the server and the dashboard following it, in one command (mlx-free here).

The server runs as a child process (``slabscope serve`` with the same options, recording into ``--record DIR``, by
default a new directory under the recordings directory), its output in a log file (the terminal is the
dashboard's). Once its first recording file is there, the dashboard opens that directory and follows it live
(``app.tui.live_follow``). Quitting the dashboard stops the server: SIGTERM (it cancels open requests, closes its
recording and its engine), then SIGKILL to whatever of its process group is left after ``STOP_WAIT_S``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.commands.errors import RunError, output_dir
from app.commands.serve_args import add_serve_arguments

STOP_WAIT_S = 15.0
POLL_S = 0.1
SKIPPED = {"help", "tui", "record", "log"}


def child_argv(args: argparse.Namespace, record: Path, log: Path) -> list[str]:
    """``slabscope serve`` with every option of ``args`` that differs from its default, without ``--tui``, and
    recording into ``record``."""
    serve_parser = argparse.ArgumentParser()
    add_serve_arguments(serve_parser)
    argv = [sys.executable, "-m", "app", "serve", "--record", str(record), "--log", str(log)]
    for action in serve_parser._actions:
        if not action.option_strings or action.dest in SKIPPED:
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:
            argv.append(flag)
        else:
            argv += [flag, "off" if value is None else str(value)]
    return argv


def run_with_tui(args: argparse.Namespace) -> int:
    from app.tui import sources

    record = output_dir(args.record or str(sources.recordings_dir() / f"serve-{time.strftime('%Y%m%d-%H%M%S')}-"
                                           f"{args.backend}"), "--record")
    log = Path(args.log) if args.log else Path(tempfile.gettempdir()) / f"slabscope-serve-{os.getpid()}.log"
    with open(log, "ab") as out:
        child = subprocess.Popen(child_argv(args, record, log.with_suffix(".engine.log")), stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_recording(child, record, args.ready_timeout, log)
        from app.tui.app import AppOptions, SlabscopeApp

        app = SlabscopeApp(AppOptions(open_paths=[record], recordings_dir=record, autostart=False))
        app.run()
        code = int(app.return_code or 0)
    finally:
        _stop(child)
    print(f"slabscope serve: stopped; its recording is in {record}, its log in {log}", file=sys.stderr)
    return code


def _wait_for_recording(child: subprocess.Popen, record: Path, timeout: float, log: Path) -> None:
    """Until a session file of the server opens (its metadata written); RunError with the log's tail when the server
    exits first or does not get there within ``timeout``."""
    from app.tui.live_follow import session_files
    from probes.errors import RecordingError
    from probes.follow import GrowingSession

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RunError(f"the server exited with code {child.returncode}: {_tail(log)}")
        for path in session_files([record]):
            try:
                GrowingSession.open(path)
                return
            except RecordingError:
                pass
        try:
            child.wait(POLL_S)  # returns at once when the server exits
        except subprocess.TimeoutExpired:
            pass
    raise RunError(f"the server wrote no recording within {timeout:g} s: {_tail(log)}")


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(lines[-3:]) or "(empty log)"


def _stop(child: subprocess.Popen) -> None:
    """SIGTERM the server; a server still running after ``STOP_WAIT_S`` is killed with its process group (the group
    it was started in: its engine worker is in it too)."""
    if child.poll() is not None:
        return
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(STOP_WAIT_S)
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        child.wait(2.0)
    except subprocess.TimeoutExpired:
        pass
