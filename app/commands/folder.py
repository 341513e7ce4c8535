"""Reading many recordings for one command (``compare``, ``report``): one file at a time (each session reduced by
``make`` and let go before the next is opened), with progress on stderr ("read k/N files", at every 5% of a long
list) and Ctrl-C answered between two files (``Interrupted``: exit 130, one line saying how far it got)."""

from __future__ import annotations

import sys

from app.commands.errors import Interrupted

PROGRESS_MIN_FILES = 20   # fewer files than this: no progress lines
PROGRESS_STEPS = 20       # one line per 5% of the files


class FolderProgress:
    """Progress lines for ``total`` files on ``stream`` (a terminal: one line rewritten in place)."""

    def __init__(self, command: str, total: int, stream=None) -> None:
        self.command, self.total = command, total
        self.stream = stream or sys.stderr
        self.every = max(1, total // PROGRESS_STEPS)
        self.shown = total >= PROGRESS_MIN_FILES
        self.tty = self.shown and self.stream.isatty()

    def done(self, count: int) -> None:
        """``count`` files read so far."""
        if not self.shown or (count % self.every and count != self.total):
            return
        end = "\n" if not self.tty or count == self.total else ""
        self.stream.write(f"{chr(13) if self.tty else ''}slabscope {self.command}: read {count}/{self.total} files"
                          + end)
        self.stream.flush()


def read_each(paths: list[str], command: str, make) -> list:
    """``[make(session, index) for each path]``, each session opened only while ``make`` runs. A damaged file
    opens on its valid prefix with one warning line (``warn_damage``); an unreadable one raises RecordingError
    (one line, the caller's exit 2); Ctrl-C raises Interrupted."""
    from app.commands.session_files import warn_damage
    from probes.replay import Session

    progress = FolderProgress(command, len(paths))
    out: list = []
    try:
        for index, path in enumerate(paths):
            session = Session.open(path)
            warn_damage(session, command)
            out.append(make(session, index))
            del session  # the next file is opened with this one gone
            progress.done(index + 1)
    except KeyboardInterrupt:
        if progress.tty:
            progress.stream.write("\n")
        raise Interrupted(f"interrupted after reading {len(out)} of {len(paths)} files") from None
    return out
