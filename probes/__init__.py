"""slabscope probes: true-footprint sampling in workers, transport to the UI, crash-safe session recordings,
replay (seek both ways, pool snapshot rebuild), what-if replay, compare gates and reports.

This package root stays light and mlx-free; the worker-only parts (``probes.live``, ``probes.sampler``) import
mlx lazily. Reader-side entry points: ``probes.replay.Session``, ``probes.store.LiveStore``.
"""

from probes.errors import RecordingError, ReplayError

__all__ = ["RecordingError", "ReplayError"]
