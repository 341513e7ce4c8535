"""Where a worker's probe cost goes, per function and thread, in a real run (lab only, never installed).

Put this folder first on PYTHONPATH and set ``PROBE_SPLIT=PREFIX``: every Python process of the run (the command and
its spawned workers) then wraps the probes' entry points (``probes.live.WorkerProbes``: flushes, samples, snapshots,
the op listener, ``emit``, ``tick``, the probe thread's stall checks; ``BatchSender.send``; ``SessionRecorder.write``)
and, when a session's probes stop, writes ``PREFIX.<pid>``: per function and thread, the thread CPU time spent
inside (``time.thread_time``), the calls and the mean. The wrapper itself costs two thread-clock reads per call
(about 1-2 us each on a VM), so the run's own probe-cost figure rises a little with it.
``PROBE_FLUSH_S=SECONDS`` also sets the probes' transport period (default ``probes.live.FLUSH_S``).

    PROBE_SPLIT=/tmp/split PYTHONPATH=lab/probe_cost/worker_split:. python3 -m app record --scenario ragged_long \
        --sample-hz 100 --backends slab --out /tmp/rec && cat /tmp/split.*
"""

import builtins
import collections
import os
import sys
import threading
import time

PREFIX = os.environ.get("PROBE_SPLIT")
WRAPPED = {
    "probes.live": ("WorkerProbes", ("_flush", "_take_sample", "_take_snapshot", "_on_op", "emit",
                                     "_write_recording", "tick", "_stalled")),
    "probes.transport": ("BatchSender", ("send",)),
    "probes.recording": ("SessionRecorder", ("write",)),
}
_totals: dict = collections.defaultdict(float)
_calls: collections.Counter = collections.Counter()
_patched: set = set()


def _wrap(cls, name: str) -> None:
    real = getattr(cls, name)

    def timed(*args, **kwargs):
        start = time.thread_time()
        try:
            return real(*args, **kwargs)
        finally:
            key = f"{cls.__name__}.{name} [{threading.current_thread().name}]"
            _totals[key] += time.thread_time() - start
            _calls[key] += 1
    setattr(cls, name, timed)


def _report() -> None:
    with open(f"{PREFIX}.{os.getpid()}", "w") as out:
        for key in sorted(_totals, key=_totals.get, reverse=True):
            total = _totals[key]
            out.write(f"{key:58s} {total * 1e3:9.2f} ms  {_calls[key]:6d} calls  {total / _calls[key] * 1e6:8.1f} us\n")


def _patch_live(cls) -> None:
    flush = os.environ.get("PROBE_FLUSH_S")
    real_init, real_stop = cls.__init__, cls.stop

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        if flush:
            self.flush_s = float(flush)

    def stop(self, *args, **kwargs):
        result = real_stop(self, *args, **kwargs)
        _report()
        return result
    cls.__init__, cls.stop = init, stop


def _patch_loaded() -> None:
    for module_name, (class_name, methods) in WRAPPED.items():
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if cls is None or module_name in _patched:
            continue
        _patched.add(module_name)
        for method in methods:
            _wrap(cls, method)
        if module_name == "probes.live":
            _patch_live(cls)


if PREFIX:
    _real_import = builtins.__import__

    def _import(*args, **kwargs):
        module = _real_import(*args, **kwargs)
        if len(_patched) < len(WRAPPED):
            _patch_loaded()
        return module
    builtins.__import__ = _import
