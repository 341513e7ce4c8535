"""What the impossible-value checks (probes/bounds.py) cost when a one-hour session is opened and its op log read.

Writes the synthetic one-hour session of ``slabscope bench probes --open-time`` (36 000 samples, 36 000 steps,
7 200 snapshot summaries, 351 152 ops), then, in this warm process, opens it and reads its op log ROUNDS times with
the bounds checks on and off, interleaved, after a warm-up. Prints the median [range] of the CPU seconds
(``time.process_time``: this machine is shared, wall time is mostly other processes). Run from the repository root:

    .venv/bin/python lab/bounds_cost.py [ROUNDS]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import probes.bounds as bounds
from probes.replay import Session
from probes.synthetic import write_synthetic_session

CHECKS = ("check_sample_columns", "check_event_figures", "check_snapshot_figures", "check_op_figures")


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    real = {name: getattr(bounds, name) for name in CHECKS}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hour.slabrec")
        write_synthetic_session(path, seconds=3600.0)
        times: dict[str, list[tuple[float, float]]] = {"on": [], "off": []}
        for index in range(rounds + 1):
            for mode in ("on", "off") if index % 2 else ("off", "on"):
                for name, check in real.items():
                    setattr(bounds, name, check if mode == "on" else (lambda *args: None))
                start = time.process_time()
                session = Session.open(path)
                opened = time.process_time() - start
                start = time.process_time()
                session.all_ops()
                if index:  # round 0 is a warm-up
                    times[mode].append((opened, time.process_time() - start))
    for part, column in (("Session.open + events + snapshot summaries", 0), ("the whole op log", 1)):
        for mode in ("off", "on"):
            values = [t[column] for t in times[mode]]
            print(f"{part}, checks {mode}: median {statistics.median(values):.3f} s CPU "
                  f"[{min(values):.3f}, {max(values):.3f}] over {len(values)} rounds")


if __name__ == "__main__":
    main()
