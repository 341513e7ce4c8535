"""``slabscope bench follow``: what following a growing recording costs (``probes.follow.GrowingSession.refresh``,
what the TUI does every half second for each rank of a live distributed run), against opening the whole file
again (what re-reading it at every poll would cost). mlx-free.

A synthetic pool session (``probes.synthetic.write_synthetic_session``: ``seconds`` of fake time, 10 Hz samples,
2 Hz snapshots, keyframes every 10 s; one hour is about 22 MiB) is cut ``tail_records`` records before its end.
Each round writes that prefix to a second file, opens it with ``GrowingSession.open``, then appends the rest
``flush_records`` records at a time (about one writer flush) and times every ``refresh()``; then it times one
``Session.open`` of the whole file. A warm-up round, then ``rounds`` rounds; the figures are the median and range
of the rounds' median refresh times and of their ``Session.open`` times.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from app.bench.stats import spread
from probes.follow import GrowingSession
from probes.format import FileImage
from probes.replay import Session
from probes.synthetic import write_synthetic_session


def record_ends(path: Path) -> list[int]:
    """Byte offset just past each record of the recording at ``path``, in file order."""
    return [ref.offset + ref.length for ref in FileImage(path).refs]


def one_round(whole: Path, live: Path, data: bytes, ends: list[int], tail: int, flush: int) -> tuple[float, float]:
    """(median seconds per ``refresh`` over the last ``tail`` records appended ``flush`` at a time, seconds for
    one ``Session.open`` of ``whole``). Rewrites ``live``. RuntimeError when the refreshes did not take every
    appended record."""
    first = len(ends) - tail
    live.write_bytes(data[:ends[first]])
    session = GrowingSession.open(live)
    times, appended, taken = [], 0, 0
    for k in range(first + flush, len(ends), flush):
        with open(live, "ab") as fh:
            fh.write(data[ends[k - flush]:ends[k]])
        appended += flush
        start = time.perf_counter()
        taken += session.refresh()
        times.append(time.perf_counter() - start)
    if taken != appended:  # a refresh that read nothing would time nothing
        raise RuntimeError(f"the followed session took {taken} of the {appended} records appended to it")
    start = time.perf_counter()
    Session.open(whole)
    return statistics.median(times), time.perf_counter() - start


def run_follow_bench(rounds: int, seconds: float, tail: int, flush: int, progress=None) -> dict:
    """Write the synthetic session in a temporary directory, run a warm-up and ``rounds`` rounds; the figures.
    ValueError when the session has too few records for ``tail`` (nothing is left behind)."""
    with tempfile.TemporaryDirectory(prefix="slabscope-bench-follow-") as tmp:
        whole, live = Path(tmp) / "session.slabrec", Path(tmp) / "live.slabrec"
        write_synthetic_session(whole, seconds=seconds)
        data, ends = whole.read_bytes(), record_ends(whole)
        if tail >= len(ends) or flush >= tail:
            raise ValueError(f"--tail-records {tail} must be below the session's {len(ends)} records and above "
                             f"--flush-records {flush}")
        one_round(whole, live, data, ends, tail, flush)  # warm-up
        results = []
        for r in range(rounds):
            results.append(one_round(whole, live, data, ends, tail, flush))
            if progress:
                progress(f"round {r + 1}/{rounds}: refresh {results[-1][0] * 1e3:.2f} ms, "
                         f"Session.open {results[-1][1] * 1e3:.0f} ms")
    refresh_ms, reopen_ms = [r[0] * 1e3 for r in results], [r[1] * 1e3 for r in results]
    return {"seconds": seconds, "file_bytes": len(data), "records": len(ends), "rounds": rounds,
            "tail_records": tail, "flush_records": flush, "refresh_ms_rounds": refresh_ms,
            "open_ms_rounds": reopen_ms, "refresh_ms": spread(refresh_ms), "open_ms": spread(reopen_ms)}


def format_report(result: dict) -> str:
    refresh, reopen = result["refresh_ms"], result["open_ms"]
    return "\n".join([
        f"file {result['file_bytes'] / 2**20:.1f} MiB, {result['records']} records; {result['rounds']} rounds after "
        "a warm-up",
        f"refresh ({result['flush_records']} new records): median {refresh['median']:.2f} ms "
        f"[{refresh['min']:.2f} .. {refresh['max']:.2f}]",
        f"Session.open of the whole file: median {reopen['median']:.0f} ms [{reopen['min']:.0f} .. "
        f"{reopen['max']:.0f}]"])
