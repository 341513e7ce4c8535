"""What a 100 Hz Python thread costs before it samples anything: the floor under the probes' cost figure.

The probe thread (probes/live.py) wakes ``sample_hz`` times a second; each wake-up is a timed wait, a syscall and
a GIL hand-over, paid in the thread's CPU time (``time.thread_time``, what ``probe_thread_cpu_s`` reports) whatever
the sample then does. This script measures that floor: a thread that only waits for its next deadline, beside a
workload thread that is either busy in Python (holding the GIL, like a host building graphs) or sleeping.

    PYTHONPATH=. python3 -m lab.probe_cost.wake_floor --hz 100 --seconds 3 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time


def wake_cost(hz: float, seconds: float, busy: bool, how: str) -> float:
    """Thread CPU seconds of a thread that wakes ``hz`` times a second for ``seconds`` and does nothing else."""
    stop, cpu = threading.Event(), [0.0]
    period = 1.0 / hz

    def waker():
        start, deadline = time.thread_time(), time.monotonic() + period
        while True:
            delay = max(0.0, deadline - time.monotonic())
            if how == "event":
                if stop.wait(delay):
                    break
            else:
                time.sleep(delay)
                if stop.is_set():
                    break
            deadline += period
        cpu[0] = time.thread_time() - start

    thread = threading.Thread(target=waker)
    thread.start()
    t0, x = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        if busy:
            for i in range(20000):
                x += i
        else:
            time.sleep(period)
    stop.set()
    thread.join()
    return cpu[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hz", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"a thread waking {args.hz:g} times a second, {args.seconds:g} s, {args.rounds} interleaved rounds: "
          "thread CPU as % of wall and us per wake-up, median [min-max]")
    cells = [(how, busy) for how in ("event", "sleep") for busy in (True, False)]
    results: dict = {cell: [] for cell in cells}
    for _ in range(args.rounds):
        for how, busy in cells:
            results[(how, busy)].append(wake_cost(args.hz, args.seconds, busy, how))
    for (how, busy), values in results.items():
        shares = [100 * v / args.seconds for v in values]
        per_wake = [1e6 * v / (args.hz * args.seconds) for v in values]
        label = f"{'Event.wait' if how == 'event' else 'time.sleep':>10}, workload thread {'busy' if busy else 'idle'}"
        print(f"  {label}: {statistics.median(shares):.2f}% [{min(shares):.2f}-{max(shares):.2f}], "
              f"{statistics.median(per_wake):.0f} us [{min(per_wake):.0f}-{max(per_wake):.0f}] per wake-up")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
