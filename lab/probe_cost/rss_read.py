"""What one RSS read costs the sampler: ``os.pread`` of /proc/self/statm (releases the GIL around the syscall) against
the sampler's libc ``pread`` called with the GIL held (``probes.sampler._gil_holding_pread``), alone and beside a
thread busy in Python (where taking the GIL back after a release waits for that thread to hand it over). Prints
microseconds of this thread's CPU time per read.

    PYTHONPATH=. python3 -m lab.probe_cost.rss_read --reads 5000
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from probes.sampler import _Rss


def per_read_us(read, count: int) -> float:
    start = time.thread_time()
    for _ in range(count):
        read()
    return (time.thread_time() - start) / count * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=5000)
    args = parser.parse_args()
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    rss = _Rss(None)
    if rss._pread is None:
        raise SystemExit("no libc pread through ctypes here")
    reads = {"os.pread": lambda: int(os.pread(fd, 128, 0).split()[1]), "libc pread, GIL held": rss}
    stop = threading.Event()

    def busy() -> None:
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i

    for label in ("alone", "beside a busy Python thread"):
        if label != "alone":
            thread = threading.Thread(target=busy, daemon=True)
            thread.start()
        print(f"{label:>28}: " + ", ".join(f"{name} {per_read_us(read, args.reads):.2f} us"
                                          for name, read in reads.items()))
    stop.set()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
