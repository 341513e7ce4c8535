"""A compacting session in the standard-tool exports: slab releases and block moves on the pool track (with their
bytes), and each shrink point that gave memory back (``Shrunk``, with its measured report) on the events track."""

from __future__ import annotations

from probes_scripted import record_scripted

from pool import ShrinkPolicy
from probes.events import Shrunk
from probes.replay import Session
from probes.trace_export import trace_process


def test_shrink_ops_and_events_become_instants(tmp_path):
    path = tmp_path / "compact.slabrec"
    _, pool, _ = record_scripted(path, steps=60, seed=3, shrink=ShrinkPolicy("compact", 1 << 30, 1.0))
    session = Session.open(path)
    process = trace_process(session, 1, "compact")
    pool_marks = process.tracks["pool"]
    releases = [m for m in pool_marks if m.name == "slab release"]
    moves = [m for m in pool_marks if m.name == "blocks moved"]
    counters = pool.counters()
    assert sum(m.args["count"] for m in releases) == counters.slab_releases > 0
    assert sum(m.args["count"] for m in moves) == counters.blocks_moved > 0
    shrunk = [m for m in process.tracks["events"] if m.name == "shrink"]
    assert len(shrunk) == len(session.events_of(Shrunk)) > 0
    assert sum(m.args["report"]["bytes_moved"] for m in shrunk) == counters.bytes_moved
