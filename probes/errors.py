"""Exceptions raised by the probes package.

``RecordingError`` is the one exception a reader of session files ever sees: truncated headers, corrupt records,
foreign files and unsupported versions all become a one-line message naming the file and the problem.
"""

from __future__ import annotations


class RecordingError(Exception):
    """A session file cannot be read (corrupt, foreign, too new) or written. The message is one line."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class ImpossibleRecord(RecordingError):
    """A CRC-valid record holding a figure no machine or run could produce (``probes.bounds``): damage from byte
    ``offset`` (the record's start). ``probes.replay.Session`` keeps the records before it, like those before a
    bad checksum; where the record is decoded after opening (ops, keyframes) it is this one-line error."""

    def __init__(self, path: object, offset: int, problem: str) -> None:
        self.offset = offset
        super().__init__(path, problem)


class ReplayError(Exception):
    """A replay/what-if request cannot be served (for example a session without an op log)."""


class RecordingDamage(UserWarning):
    """Warned (``warnings.warn``) when ``Session.open`` reads a damaged file's valid prefix; the message is the one
    line ``Session.damage`` holds. Command-line tools print that line themselves (``slabscope`` filters this
    warning class); a library user sees it on stderr unless filtered."""
