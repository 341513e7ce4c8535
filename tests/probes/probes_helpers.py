"""Helpers for the probes tests: synthetic event streams written through the real recorder."""

from __future__ import annotations

from probes.events import PhaseEdge, Sample, Step
from probes.recording import SessionRecorder

T0 = 1000.0  # a fake monotonic start time


def sample(t: float, step: int, footprint: int) -> Sample:
    return Sample(t=T0 + t, step=step, tokens=step * 4, active=footprint - 100, cache=100, footprint=footprint,
                  peak=footprint, footprint_max=footprint, rss=footprint + 5000, rss_max=footprint + 5000,
                  sys_available=10**9, weights=0, pool_live=0, pool_free=0, other_active=footprint - 100,
                  rss_other=5000, cost_us=1.0)


def synthetic_batches(num_batches: int, per_batch: int = 3) -> list[list]:
    """Batches of samples and step events at 10 Hz with footprints that rise then fall."""
    batches = []
    for b in range(num_batches):
        batch = []
        for k in range(per_batch):
            i = b * per_batch + k
            batch.append(sample(i * 0.1, i, 1000 + (i % 50) * 10))
            if i % 10 == 0:
                batch.append(Step(t=T0 + i * 0.1, step=i, tokens=i * 4, phase="decode", type="decode", batch=1,
                                  num_tokens=1, wall_s=0.01))
        batches.append(batch)
    return batches


def write_synthetic(path, num_batches: int = 20, close: bool = True) -> list[list]:
    """Write a synthetic session (meta, phase start, batches, phase end, END when close)."""
    batches = synthetic_batches(num_batches)
    rec = SessionRecorder(path, {"scenario": "synthetic", "backend": "dense"}, T0)
    rec.write([PhaseEdge(name="decode", edge="start", t=T0)])
    for batch in batches:
        rec.write(batch)
    end_t = T0 + num_batches * 0.3
    rec.write([PhaseEdge(name="decode", edge="end", t=end_t)])
    if close:
        rec.close({"throughput_tok_s": 123.0}, t=end_t)
    else:
        rec.abandon()
    return batches
