"""The recorded sessions a command names on its command line: files and directories expanded, opened (a damaged
file on its valid prefix, with one warning line), and the baseline picked among them. Shared by ``compare``,
``compare_ranks``, ``record``, ``report``, ``export`` and ``whatif``; imports nothing of theirs."""

from __future__ import annotations

import sys

from app.commands.errors import UsageError


def expand_paths(paths: list[str]) -> list[str]:
    """Session files named directly, plus every *.slabrec inside named directories (sorted)."""
    from pathlib import Path

    out: list[str] = []
    for raw in paths:
        path = Path(raw)
        out.extend(sorted(str(p) for p in path.glob("*.slabrec")) if path.is_dir() else [raw])
    return out


def open_sessions(paths: list[str], command: str = "compare"):
    """(sessions, None) or (None, one-line error) for the first unreadable file. A damaged file opens on its valid
    prefix with one warning line on stderr (``warn_damage``)."""
    from probes.errors import RecordingError
    from probes.replay import Session

    sessions = []
    for path in expand_paths(paths):
        try:
            sessions.append(Session.open(path))
        except RecordingError as exc:
            return None, str(exc)
        warn_damage(sessions[-1], command)
    if not sessions:
        return None, "no session files found"
    return sessions, None


def warn_damage(session, command: str) -> None:
    """One line on stderr when ``session`` was read from a damaged file (what, where, and what is covered)."""
    if session.damage is not None:
        print(f"slabscope {command}: warning: {session.path}: {session.damage}; figures cover the "
              f"{session.duration:.1f} s before it", file=sys.stderr)


def _baseline_keys(session) -> list[str]:
    return [str(key) for key in (session.meta.get("label"), session.meta.get("backend"), session.path)
            if key is not None]


def pick_baseline(sessions, wanted: str | None) -> int:
    """Index of the baseline: matching --baseline (label/backend/path), else the dense session, else 0.
    UsageError when ``wanted`` matches none of the sessions (never a silent pick of another)."""
    if wanted is not None:
        for index, s in enumerate(sessions):
            if wanted in _baseline_keys(s):
                return index
        names = sorted({key for s in sessions for key in _baseline_keys(s)})
        raise UsageError(f"--baseline {wanted!r} matches no session (labels, backends and files: "
                         f"{', '.join(names)})")
    for index, s in enumerate(sessions):
        if s.meta.get("backend") == "dense":
            return index
    return 0
