"""A recording's metadata costs its start once per process: the commit (two git calls) and the package versions
are read at the first recording and reused by every later one (``bench probes`` and ``serve`` start many in one
process; a short run paid ~16 ms of its timed window for them)."""

from __future__ import annotations

import subprocess

import probes.meta as meta


def test_the_commit_and_versions_are_read_once_per_process(monkeypatch):
    getattr(meta.git_commit, "cache_clear", lambda: None)()
    meta._version.cache_clear()
    calls = []
    real_run = subprocess.run

    def counting_run(*args, **kwargs):
        calls.append(args[0])
        return real_run(*args, **kwargs)

    monkeypatch.setattr(meta.subprocess, "run", counting_run)
    first = meta.collect_meta({"scenario": "t"})
    git_calls = len(calls)
    assert git_calls >= 1  # the first recording asks git
    second = meta.collect_meta({"scenario": "t"})
    assert len(calls) == git_calls, "a later recording asked git again"
    assert second["commit"] == first["commit"]
    assert meta._version.cache_info().hits > 0
