"""What a server is configured with (mlx-free, picklable): the limits it admits requests by and the engine worker's
whole configuration. Kept apart from the modules that import mlx: the front, and a spawned worker before it has
loaded OpenBLAS (app/models/blas.py: it must come before mlx), import this and nothing heavier."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

from app.workloads.spec import RunSpec


@dataclass(frozen=True)
class ServeLimits:
    """What the server admits: ``max_running`` sequences in the batch, ``max_waiting`` queued (more: 429),
    ``default_max_tokens`` for a request that names none (capped by the model's positions)."""

    max_running: int = 64
    max_waiting: int = 1024
    default_max_tokens: int = 512


@dataclass
class WorkerConfig:
    """Everything the worker needs (picklable): the run's spec, the server's limits, the recording's place."""

    spec: RunSpec
    limits: ServeLimits = field(default_factory=ServeLimits)
    prefix_cache_blocks: int | None = 256
    record_dir: str | None = None
    segment_bytes: int = 256 * 1024 * 1024
    keep_segments: int = 8
    log_path: str = os.devnull
    server_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    front_url: str = ""
