"""One writer per output file, and nothing written over a file the user did not give up (mlx-free).

Two ways to write a file, both refusing a path that names one of the command's inputs (``check_not_input``:
``os.path.samefile``, so a symlink or a hard link to the input counts) and an existing file unless ``force``:

* A **live recording** grows while its run runs and stays readable after a crash (docs/recording-format.md), so it
  is written at its final path from the start, never renamed into place at the end. ``claim`` creates it with
  ``O_CREAT | O_EXCL`` (the kernel lets one creator win, whatever the timing) and holds an ``flock`` on it for
  the whole run; ``force`` replaces an existing file only when no live writer holds that lock (the new file is
  made and locked beside it, then renamed over it). The process that writes the records may be another one than
  the claimant (a worker): it opens the claimed file with ``adopt``, which checks it is still the claimed,
  empty file (device and inode: the ``Claim.token``).
* A **finished file** (migrate's copy, export's trace) is written whole by ``write_atomically``: into a temporary
  file beside the target, fsynced, then published under the target's name (a hard link, which fails if the name
  exists: no check-then-write race; with ``force``, a rename over it once no live writer holds it) and the
  directory fsynced. A failure at any point (a full disk, ``ulimit -f``, an exception) removes the temporary file
  and leaves the target as it was.

Every refusal and failure is an ``OutputError``: one line naming the path.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import time
from typing import Callable, Iterable

CREATE = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
ADOPT = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
LOCK_WAIT_S = 2.0  # longest wait for a just-created file's lock (its other holders hold it for an instant)
FORCE_HINT = "slabscope writes over no file unasked: choose another path, or pass --force to replace it"


class OutputError(Exception):
    """A file cannot be written (refused, or the write failed). The message is one line naming the path."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def check_not_input(target: str | os.PathLike, inputs: Iterable[str | os.PathLike], what: str = "input") -> None:
    """``OutputError`` when ``target`` is the same file as one of ``inputs`` (same device and inode: the same
    path, a symlink to it, a hard link, a path through a symlinked directory). A target that does not exist yet
    is no input."""
    for source in inputs:
        try:
            same = os.path.samefile(target, source)
        except OSError:  # either side missing: not the same file
            continue
        if same:
            raise OutputError(target, f"is the same file as the {what} {os.fspath(source)!r}; slabscope never "
                                      "writes over its own input: choose another path")


def _lock(fd: int) -> bool:
    """Take the writer's lock on ``fd`` without waiting; False when another open file holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _lock_within(fd: int, seconds: float) -> bool:
    """Take the writer's lock on ``fd``, retrying for up to ``seconds``; False when it stays held."""
    deadline = time.monotonic() + seconds
    while not _lock(fd):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _same_inode(fd: int, path: str) -> bool:
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _live_writer_problem(path: str) -> str | None:
    """Why ``path`` (an existing name) cannot be replaced now: a live writer holds its lock. None when it can."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None  # a dangling symlink, a file without read permission: nothing live to protect by a lock
    try:
        if not _lock(fd):
            return "is being written by another slabscope process right now (it holds the file's writer lock)"
        return None
    finally:
        os.close(fd)  # drops the probe lock


def _exists_problem(path: str) -> str:
    live = _live_writer_problem(path)
    if live is not None:
        return f"{live}; wait for it to finish or choose another path"
    try:
        size = f" ({os.path.getsize(path):,} bytes)"
    except OSError:
        size = ""
    return f"exists{size}; {FORCE_HINT}"


def fsync_directory(directory: str) -> None:
    """Make a rename or a new name in ``directory`` durable (a machine crash after it keeps the new name)."""
    fd = os.open(directory or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _beside(path: str, purpose: str) -> str:
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.{secrets.token_hex(4)}.{purpose}")


class Claim:
    """The one live writer's hold on ``path``: an open, locked file descriptor (``fd``: write-only, append). The
    claimant keeps it until the run ends, then calls ``release``. ``token`` (device, inode) lets another process
    ``adopt`` the file."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd = path, fd
        info = os.fstat(fd)
        self.token = (info.st_dev, info.st_ino)

    def release(self) -> None:
        """Drop the lock. A claimed file that is still empty (its run never wrote: it failed before recording) is
        removed, so no empty file blocks the next run. Idempotent."""
        if self.fd is None:
            return
        try:
            if os.fstat(self.fd).st_size == 0 and _same_inode(self.fd, self.path):
                os.unlink(self.path)
        except OSError:
            pass  # nothing to tidy up that is worth failing the run for
        os.close(self.fd)
        self.fd = None


def claim(path: str | os.PathLike, force: bool = False, inputs: Iterable = ()) -> Claim:
    """Create ``path`` as a new, empty, locked file for one live writer (module docstring). ``OutputError`` when
    it exists (``force``: unless a live writer holds it), is an input, or cannot be created."""
    path = os.fspath(path)
    check_not_input(path, inputs)
    try:
        fd = os.open(path, CREATE, 0o644)
    except FileExistsError:
        if not force:
            raise OutputError(path, _exists_problem(path)) from None
        return _replace_for_live_writer(path)
    except OSError as exc:
        raise OutputError(path, f"cannot create the file: {_why(exc)}") from None
    # Another holder of the new file's lock holds it for an instant (a refused writer's probe, or a forced writer
    # replacing the new name, which then is not at ``path``: checked after); a bounded wait, never a hang.
    if not _lock_within(fd, LOCK_WAIT_S) or not _same_inode(fd, path):
        os.close(fd)
        raise OutputError(path, "was taken by another writer while it was being created; choose another path")
    return Claim(path, fd)


def _replace_for_live_writer(path: str) -> Claim:
    """``force``: a new locked file renamed over ``path``, unless a live writer holds the file there."""
    try:
        old = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        old = None  # a dangling symlink or an unreadable file: replaced by the rename, nothing live behind it
    try:
        if old is not None and (not _lock(old) or not _same_inode(old, path)):
            raise OutputError(path, "is being written by another slabscope process right now (it holds the "
                                    "file's writer lock); --force replaces finished files only")
        temp = _beside(path, "claim")
        try:
            fd = os.open(temp, CREATE, 0o644)
        except OSError as exc:
            raise OutputError(path, f"cannot create the file: {_why(exc)}") from None
        _lock(fd)  # a fresh, randomly named file: nobody else has it open
        try:
            os.rename(temp, path)
            fsync_directory(os.path.dirname(path))
        except OSError as exc:
            os.close(fd)
            _unlink_quietly(temp)
            raise OutputError(path, f"cannot replace the file: {_why(exc)}") from None
        return Claim(path, fd)
    finally:
        if old is not None:
            os.close(old)


def adopt(path: str | os.PathLike, token) -> int:
    """Open the file another process claimed (``Claim.token``) for appending; ``OutputError`` unless ``path``
    still names that file and it is empty (nothing written there yet: this process is its writer)."""
    path = os.fspath(path)
    try:
        fd = os.open(path, ADOPT)
    except OSError as exc:
        raise OutputError(path, f"cannot open the claimed recording: {_why(exc)}") from None
    info = os.fstat(fd)
    if (info.st_dev, info.st_ino) != tuple(token) or info.st_size != 0:
        os.close(fd)
        raise OutputError(path, "is no longer the empty file claimed for this run (replaced or written by another "
                                "process); nothing was written")
    return fd


def check_target(target: str | os.PathLike, force: bool = False, inputs: Iterable = ()) -> None:
    """Refuse (``OutputError``) a target that is an input, or exists (``force``: unless a live writer holds it):
    what a command checks before it does any work. ``claim`` and ``write_atomically`` check again when they
    create the file (the kernel decides races there)."""
    target = os.fspath(target)
    check_not_input(target, inputs)
    if not os.path.lexists(target):
        return
    if not force:
        raise OutputError(target, _exists_problem(target))
    live = _live_writer_problem(target)
    if live is not None:
        raise OutputError(target, f"{live}; --force replaces finished files only")


def write_atomically(target: str | os.PathLike, write: Callable[[str], object], force: bool = False,
                     inputs: Iterable = ()):
    """Write a finished file: ``write(temp_path)`` fills a temporary file beside ``target`` (and may check it),
    which is then fsynced and published under ``target``'s name, the directory fsynced; returns what ``write``
    returned. The target is refused before anything is written when it is an input or exists (``force``:
    replaced, unless a live writer holds it). Any failure removes the temporary file, leaves the target as it was
    and propagates (an ``OSError`` as an ``OutputError``)."""
    target = os.fspath(target)
    check_target(target, force, inputs)
    temp = _beside(target, "partial")
    try:
        fd = os.open(temp, CREATE, 0o644)
        os.close(fd)
        result = write(temp)
        _fsync_file(temp)
        _publish(temp, target, force)
    except OSError as exc:
        _unlink_quietly(temp)
        raise OutputError(target, f"writing failed, nothing written: {_why(exc)}") from None
    except BaseException:
        _unlink_quietly(temp)
        raise
    try:
        fsync_directory(os.path.dirname(target))
    except OSError as exc:
        raise OutputError(target, f"written, but its directory could not be synced: {_why(exc)}") from None
    return result


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(temp: str, target: str, force: bool) -> None:
    """Give the finished ``temp`` the name ``target``; the temporary name is gone afterwards (OutputError when the
    target appeared meanwhile, or a live writer holds it)."""
    if not force:
        try:
            os.link(temp, target)  # fails when the name exists: no window between a check and the write
        except FileExistsError:
            raise OutputError(target, _exists_problem(target)) from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOSYS):
                raise
            if os.path.lexists(target):  # a file system without hard links: check, then rename
                raise OutputError(target, _exists_problem(target)) from None
            os.rename(temp, target)
        else:
            os.unlink(temp)
    else:
        live = _live_writer_problem(target) if os.path.lexists(target) else None
        if live is not None:
            raise OutputError(target, f"{live}; --force replaces finished files only")
        os.rename(temp, target)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
