"""What following a growing recording costs (probes.follow.GrowingSession.refresh), against re-opening the file.

A one-hour synthetic pool session (``probes.synthetic.write_synthetic_session``: 10 Hz samples, 2 Hz snapshots,
keyframes every 10 s; about 22 MiB) is cut 200 records before its end; each round reopens that prefix, then appends
the rest five records at a time (about one writer flush) and times every ``refresh()``; it also times one
``Session.open`` of the whole file (what re-reading the file at every poll would cost). A warm-up round, then
ROUNDS rounds; prints the median and range of the rounds' medians.

    .venv/bin/python tests/probes/bench_follow.py [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from probes import format as fmt  # noqa: E402
from probes.follow import GrowingSession  # noqa: E402
from probes.replay import Session  # noqa: E402
from probes.synthetic import write_synthetic_session  # noqa: E402

FLUSH_RECORDS = 5
TAIL_RECORDS = 200


def record_ends(data: bytes) -> list[int]:
    ends, pos = [], fmt.FILE_HEADER.size
    while pos < len(data):
        pos += fmt.RECORD_HEADER.size + fmt.RECORD_HEADER.unpack_from(data, pos)[3]
        ends.append(pos)
    return ends


def one_round(whole: Path, live: Path, data: bytes, ends: list[int]) -> tuple[float, float]:
    """(median refresh seconds, Session.open seconds of the whole file)."""
    first = len(ends) - TAIL_RECORDS
    live.write_bytes(data[:ends[first]])
    session = GrowingSession.open(live)
    times = []
    for k in range(first + FLUSH_RECORDS, len(ends), FLUSH_RECORDS):
        with open(live, "ab") as fh:
            fh.write(data[ends[k - FLUSH_RECORDS]:ends[k]])
        start = time.perf_counter()
        session.refresh()
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    Session.open(whole)
    return statistics.median(times), time.perf_counter() - start


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as tmp:
        whole, live = Path(tmp) / "hour.slabrec", Path(tmp) / "live.slabrec"
        write_synthetic_session(whole, seconds=3600.0)
        data = whole.read_bytes()
        ends = record_ends(data)
        one_round(whole, live, data, ends)  # warm-up
        results = [one_round(whole, live, data, ends) for _ in range(rounds)]
    refresh = sorted(r[0] * 1e3 for r in results)
    reopen = sorted(r[1] * 1e3 for r in results)
    print(f"file {len(data) / 2**20:.1f} MiB, {len(ends)} records; {rounds} rounds after a warm-up")
    print(f"refresh ({FLUSH_RECORDS} new records): median {statistics.median(refresh):.2f} ms "
          f"[{refresh[0]:.2f} .. {refresh[-1]:.2f}]")
    print(f"Session.open of the whole file: median {statistics.median(reopen):.0f} ms "
          f"[{reopen[0]:.0f} .. {reopen[-1]:.0f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
