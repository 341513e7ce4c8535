"""slabscope probes: true-footprint sampling in workers, transport to the UI, crash-safe session recordings,
replay (seek both ways, pool snapshot rebuild), what-if replay, compare gates and reports.

This package root stays light and mlx-free; the worker-only parts (``probes.live``, ``probes.sampler``) import
mlx lazily. Typed records: ``probes.events``; the read model of a session, live or recorded:
``probes.store.SessionModel`` (``probes.replay.Session.open(path)`` for a file).
"""

from probes.errors import RecordingError, ReplayError

__all__ = ["RecordingError", "ReplayError"]
