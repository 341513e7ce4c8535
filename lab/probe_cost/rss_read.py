"""What one RSS read costs the sampler: ``os.pread`` of /proc/self/statm (what the sampler uses; it releases the GIL
around the syscall) against libc's ``pread`` called with the GIL held (``ctypes.PyDLL``), alone and beside a thread
busy in Python (where taking the GIL back after a release may wait for that thread to hand it over). Prints
microseconds per read of this thread's CPU time and of wall time (a read that gives the GIL away waits for it: the
busy thread keeps it up to the switch interval, 5 ms).

    PYTHONPATH=. python3 -m lab.probe_cost.rss_read --reads 5000
"""

from __future__ import annotations

import argparse
import os
import threading
import time



def gil_holding_pread():
    """libc's ``pread`` through ``ctypes.PyDLL`` (the GIL stays held during the call)."""
    import ctypes

    pread = ctypes.PyDLL(None).pread
    pread.restype = ctypes.c_ssize_t
    pread.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long]
    buffer = ctypes.create_string_buffer(128)

    def read(fd: int) -> int:
        count = pread(fd, buffer, 128, 0)
        return int(buffer.raw[:count].split()[1])
    return read


def per_read_us(read, count: int) -> tuple[float, float]:
    """This thread's CPU time and wall time per read, microseconds."""
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(count):
        read()
    return (time.thread_time() - cpu) / count * 1e6, (time.perf_counter() - wall) / count * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=5000)
    args = parser.parse_args()
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    held = gil_holding_pread()
    reads = {"os.pread": lambda: int(os.pread(fd, 128, 0).split()[1]), "libc pread, GIL held": lambda: held(fd)}
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
        cells = [(name, *per_read_us(read, args.reads)) for name, read in reads.items()]
        print(f"{label:>28}: " + ", ".join(f"{name} {cpu:.2f} us CPU / {wall:.2f} us wall" for name, cpu, wall in cells))
    stop.set()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
