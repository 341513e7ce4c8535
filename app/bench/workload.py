"""What every engine bench runs (``bench throughput``, ``bench host``): a scenario with overrides on one model,
dtype and device, and the engines compared on it. The command-line side is ``app.commands.bench_workload``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BenchWorkload:
    """The workload and the engines a bench compares; subclasses add their own knobs and default engines."""

    scenario: str = "distinct_burst"
    overrides: dict = field(default_factory=dict)
    model: str = "synthetic:qwen3-0.6b"
    dtype: str | None = None
    device: str | None = None
    engines: tuple = ()


def check_engines(engines: tuple, known: tuple) -> None:
    """ValueError (one line) unless ``engines`` is a non-empty subset of ``known``."""
    unknown = [e for e in engines if e not in known]
    if unknown or not engines:
        raise ValueError(f"unknown engine(s) {unknown or list(engines)}; choose from {', '.join(known)}")
