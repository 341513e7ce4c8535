"""The two ways a sub-command fails on purpose, and the output checks every writing command shares.

``UsageError`` (exit 2): the command line asks for something impossible (a path that cannot be written, a
baseline that is not among the sessions). ``RunError`` (exit 1): the work itself failed. ``Interrupted`` (exit 130):
Ctrl-C, with how far the command got. ``app.cli.main`` prints
either as one line ``slabscope COMMAND: message`` on stderr; no traceback.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


class UsageError(Exception):
    """Exit 2, one line."""


class RunError(Exception):
    """Exit 1, one line."""


class Interrupted(Exception):
    """Exit 130 (Ctrl-C), one line saying how far the command got."""


def output_dir(path: str, flag: str) -> Path:
    """``path`` as a writable directory, created if missing (with its parents). UsageError when it is a file, or
    cannot be created or written."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{flag} {path!r} exists and is not a directory")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {path!r}: cannot create the directory: {exc.strerror or exc}") from None
    _check_writable(target, f"{flag} {path!r}")
    return target


def output_file(path: str, flag: str) -> Path:
    """``path`` as a file that can be written: not a directory, in an existing writable directory (not created:
    a typo in the directory should not silently make one). UsageError otherwise."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{flag} {path!r} is a directory; give a file path")
    parent = target.parent
    if not parent.is_dir():
        raise UsageError(f"{flag} {path!r}: directory {str(parent)!r} does not exist")
    _check_writable(parent, f"{flag} {path!r}")
    return target


def _check_writable(directory: Path, what: str) -> None:
    """Create and remove a file in ``directory`` (permission bits say nothing for root or read-only mounts)."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise UsageError(f"{what}: cannot write in {str(directory)!r}: {exc.strerror or exc}") from None
