"""What the dashboard tells the user once, as a notification: a worker that failed (with the tail of its
traceback), a recording that cannot be read, a distributed run that ended before any rank recording, a live
recording that stopped. A run the user stopped (``x``) is no failure: its status bar says "stopped" and nothing is
announced. Mixed into ``SlabscopeApp`` (it uses the app's ``store``, ``controller``, ``notify`` and the
``_announced`` set of what was said already)."""

from __future__ import annotations


class Announcements:
    """The app's one-time notifications (see the module docstring)."""

    def _report_crashes(self) -> None:
        """A worker that failed (or a recording whose op log does not replay) gets one error notification with its
        message and the tail of its traceback."""
        generation = self.store.generation
        for model in self.store.sessions.values():
            error = model.error
            if model.status == "stopped":  # the user asked for it: the status bar says "stopped", no alarm
                continue
            if error is not None and (generation, model.label) not in self._announced:
                self._announced.add((generation, model.label))
                tail = "\n".join(error.traceback.strip().splitlines()[-4:])
                self.notify(f"{model.label}: {error.text}" + (f"\n{tail}" if tail else ""), severity="error",
                            timeout=30)
        for label, problem in list(self.store.problems.items()):
            if (generation, "problem", label) not in self._announced:
                self._announced.add((generation, "problem", label))
                self.notify(problem, severity="error", timeout=30)

    def _report_rank_run(self) -> None:
        """A distributed run whose ``record`` ended before any run was on screen (a bad flag, a launch that failed):
        one error notification with the last thing it printed."""
        ranks = self.controller.ranks
        key = (self.store.generation, "ranks")
        if ranks is None or not ranks.done or self.store.sessions or key in self._announced:
            return
        self._announced.add(key)
        said = next((line for line in reversed(ranks.output) if line.strip()), "no output")
        self.notify(f"slabscope record --ranks ended without a rank recording: {said}", severity="error", timeout=30)

    def _report_recordings(self) -> None:
        ingest = self.controller.ingest
        if ingest is not None and ingest.record_error:
            self.notify(ingest.record_error, severity="error")
            ingest.record_error = None

