"""Where the probes' own cost goes, in process: ``WorkerProbes`` recording to a file and sending to a
``multiprocessing`` queue drained by a reader process (as a worker's are), beside a workload thread busy in Python
that ticks every ``--step-ms`` and emits an event per step. Prints the probe thread's CPU split by what it did
(samples, flushes: encode + queue put, recording writes), the workload thread's time inside the probes, and the
workload's steps per second against the same loop with no probes (what the user sees), interleaved rounds.

    PYTHONPATH=. python3 -m lab.probe_cost.breakdown --hz 100 --seconds 3 --rounds 3
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time


def _drain(q, stop) -> None:
    while not stop.is_set():
        try:
            q.get(timeout=0.05)
        except Exception:
            pass


def busy_steps(seconds: float, step_ms: float, probes=None) -> int:
    """Units of Python work done in ``seconds``, ticking the probes every ~step_ms (a step boundary)."""
    from probes.events import LogLine

    units, steps, t0, x = 0, 0, time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        end = time.monotonic() + step_ms / 1e3
        while time.monotonic() < end:
            for i in range(200):
                x += i
            units += 1
        steps += 1
        if probes is not None:
            probes.emit(LogLine(text="step"))
            probes.tick(steps, steps)
    return units


def timed_method(obj, name: str, totals: dict) -> None:
    real = getattr(obj, name)

    def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return real(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.thread_time() - start
            totals[name + "#"] = totals.get(name + "#", 0) + 1
    setattr(obj, name, wrapper)


def with_probes(hz: float, seconds: float, step_ms: float, q) -> tuple[int, dict]:
    from probes.live import WorkerProbes

    with tempfile.TemporaryDirectory() as tmp:
        probes = WorkerProbes(q, sample_hz=hz, snapshot_hz=0.0, record_path=f"{tmp}/b.slabrec", meta={"scenario": "t"})
        totals: dict = {}
        for name in ("_flush", "_write_recording"):
            timed_method(probes, name, totals)
        timed_method(probes.sender, "send", totals)
        timed_method(probes._stop, "wait", totals)  # its count: the probe thread's wake-ups
        probes.start()
        steps = busy_steps(seconds, step_ms, probes)
        overhead = probes.overhead()
        probes.stop()
    totals.update(thread=overhead.probe_thread_cpu_s, workload=overhead.workload_thread_s, wall=overhead.wall_s,
                  samples=overhead.samples, sample_us=overhead.sample_cost_us_mean)
    return steps, totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hz", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    q, stop = mp.Queue(maxsize=256), mp.Event()
    reader = mp.Process(target=_drain, args=(q, stop), daemon=True)
    reader.start()
    bare, probed, parts = [], [], []
    busy_steps(0.5, args.step_ms)  # warm-up
    for _ in range(args.rounds):
        bare.append(busy_steps(args.seconds, args.step_ms))
        steps, totals = with_probes(args.hz, args.seconds, args.step_ms, q)
        probed.append(steps)
        parts.append(totals)
    stop.set()
    reader.join(2)
    loss = [100 * (1 - p / b) for p, b in zip(probed, bare)]
    print(f"{args.hz:g} Hz, steps of {args.step_ms:g} ms, {args.seconds:g} s, {args.rounds} interleaved rounds")
    print(f"  workload's Python work lost to the probes: {statistics.median(loss):.2f}% "
          f"[{min(loss):.2f}-{max(loss):.2f}]")
    print(f"  probe-thread wake-ups per second: {statistics.median([t['wait#'] for t in parts]) / args.seconds:.1f}")
    for key in ("thread", "workload", "_flush", "send", "_write_recording"):
        shares = [100 * t[key] / t["wall"] for t in parts if key in t]
        calls = [t.get(key + "#", 0) for t in parts]
        print(f"  {key:>17}: {statistics.median(shares):.3f}% of wall [{min(shares):.3f}-{max(shares):.3f}]"
              + (f", {statistics.median(calls):.0f} calls" if any(calls) else ""))
    print(f"  samples {statistics.median([t['samples'] for t in parts]):.0f}, "
          f"{statistics.median([t['sample_us'] for t in parts]):.1f} us each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
