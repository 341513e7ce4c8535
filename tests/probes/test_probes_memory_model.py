"""Memory model of a session: on a discrete CUDA GPU MLX memory is device memory, so host RSS is never reduced by
MLX's counters (that gave negative "unexplained RSS" on the H200 recordings)."""

from pathlib import Path

from probes.meta import memory_model_of
from probes.replay import Session
from probes.sampler import accounting_parts

GPU_SLAB = Path(__file__).resolve().parents[2] / "assets" / "recordings" / "gpu" / "distinct_burst-slab.slabrec"


def test_explicit_field_wins():
    assert memory_model_of({"memory_model": "unified", "device": "gpu", "platform": "linux"}) == "unified"
    assert memory_model_of({"memory_model": "discrete", "device": "cpu"}) == "discrete"


def test_inferred_for_older_sessions():
    assert memory_model_of({"device": "Device(gpu, 0)", "platform": "linux"}) == "discrete"
    assert memory_model_of({"device": "gpu (Apple M3 Max)", "platform": "macOS-15.1-arm64"}) == "unified"
    assert memory_model_of({"device": "cpu", "platform": "Linux-6.1-x86_64"}) == "unified"
    assert memory_model_of({}) == "unified"


def test_gpu_recording_accounting_shows_host_rss_not_a_negative_remainder():
    session = Session.open(GPU_SLAB)
    assert memory_model_of(session.meta) == "discrete"
    last = session.samples.at(len(session.samples) - 1)
    parts = accounting_parts(last, discrete=True)
    assert parts[-1].label == "host RSS (not on GPU)"
    assert parts[-1].bytes == last.rss > 0
