"""Opening many recordings without freezing the screen: past ``BACKGROUND_FILES`` files (or ``BACKGROUND_BYTES``)
the TUI opens them in a thread of their own, shows "OPENING k/N" in the status bar, and a quit is handled at once
(the thread stops between two files). A folder of 2,000 recordings used to hold the UI thread for 19 s, Ctrl-C and
q unanswered. Fewer files open on the UI thread as before: at once, ready when the first frame is drawn. The Sessions
view lists a large directory the same way ("listing k/N" in its header)."""

from __future__ import annotations

import threading
from pathlib import Path

from app.tui import sources

BACKGROUND_FILES = 16
BACKGROUND_BYTES = 64 * 2**20


def in_background(files: list[Path]) -> bool:
    """True when opening ``files`` may take long enough to hold the screen (their count or their bytes)."""
    if len(files) > BACKGROUND_FILES:
        return True
    total = 0
    for path in files:
        try:
            total += path.stat().st_size
        except OSError:
            continue
    return total > BACKGROUND_BYTES


class BackgroundOpen:
    """One opening (``open_recordings``, or with ``listing`` the Sessions view's ``list_recordings``) in its own
    daemon thread. ``done(result)`` and ``step(k, n)`` run on the app's thread (``call_from_thread``); ``cancel()``
    makes the thread stop before its next file and report nothing."""

    def __init__(self, app, paths: list[Path], files: list[Path], as_run: bool, done, step,
                 listing: bool = False) -> None:
        self.app, self.paths, self.files, self.as_run = app, paths, files, as_run
        self.done, self.step, self.listing = done, step, listing
        self.count = 0
        self._cancel = threading.Event()
        self.thread = threading.Thread(target=self._run, name="slabscope-open", daemon=True)

    def start(self) -> "BackgroundOpen":
        self.thread.start()
        return self

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _run(self) -> None:
        try:
            if self.listing:
                opened = sources.list_recordings(self.paths[0], files=self.files, cancel=self._cancel,
                                                 progress=self._progress)
            else:
                opened = sources.open_recordings(self.paths, self.as_run, files=self.files, cancel=self._cancel,
                                                 progress=self._progress)
        except sources.OpenCancelled:
            return
        self._to_app(self.done, opened)

    def _progress(self, count: int, total: int) -> None:
        self.count = count
        if count == total or count % max(1, total // 100) == 0:
            self._to_app(self.step, count, total)

    def _to_app(self, callback, *args) -> None:
        if self._cancel.is_set():
            return
        try:
            self.app.call_from_thread(callback, *args)
        except RuntimeError:  # the app has stopped: nothing to show it to
            self._cancel.set()
