"""Chrome's JSON trace format (the Trace Event Format read by chrome://tracing, ui.perfetto.dev and Speedscope) from
``probes.trace_export.TraceProcess`` records (mlx-free, standard library only).

Layout: one process per session (``pid``, named with ``process_name`` metadata and ordered by
``process_sort_index``); one thread per slice/instant track (``thread_name``: phases, steps, pool, decisions,
errors, events); counters are process-level ``"ph": "C"`` events whose one argument is named by the unit (Perfetto
shows a counter as "NAME UNIT"). Slices are complete events (``"X"`` with ``dur``), instants ``"i"`` with thread
scope. Times are integer microseconds since each session's start. The file is UTF-8 with names as written (no
``\\u`` escapes: viewers show escapes verbatim). Counter tracks: the JSON format has no order field, so viewers sort
them as they will (Perfetto: by name); the protobuf writer sets the order.
"""

from __future__ import annotations

import json

from probes.trace_export import TRACKS, TraceProcess

US = 1_000_000


def chrome_events(process: TraceProcess) -> list[dict]:
    """Every trace event of one process, metadata first."""
    pid = process.pid
    events: list[dict] = [
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": process.name}},
        {"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}},
    ]
    for tid, track in enumerate(TRACKS, start=1):
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": track}})
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    for counter in process.counters:
        name, unit = counter.name, counter.unit
        events.extend({"ph": "C", "pid": pid, "tid": 0, "name": name, "ts": round(t * US), "args": {unit: value}}
                      for t, value in zip(counter.t, counter.values))
    for tid, track in enumerate(TRACKS, start=1):
        for mark in process.tracks[track]:
            event = {"pid": pid, "tid": tid, "name": mark.name, "ts": round(mark.t * US), "args": mark.args}
            if mark.dur is None:
                event.update(ph="i", s="t")
            else:
                # the end rounded, not the duration: rounding both start and duration could end a slice 1 us past
                # the next one's start (seen on an H200 recording), and slices on one track must nest
                event.update(ph="X", dur=round((mark.t + mark.dur) * US) - event["ts"])
            events.append(event)
    return events


def write_chrome(processes: list[TraceProcess], path) -> int:
    """Write the processes as one JSON trace to ``path``; returns the bytes written."""
    trace = {"traceEvents": [event for process in processes for event in chrome_events(process)],
             "displayTimeUnit": "ms",
             "otherData": {"generator": "slabscope export",
                           "sessions": {str(p.pid): p.name for p in processes}}}
    text = json.dumps(trace, separators=(",", ":"), default=str, ensure_ascii=False)  # names stay UTF-8 ("·")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return len(text.encode("utf-8"))
