"""The bounds a reader puts on what a session file may ask for, checked before acting on it (mlx-free).

A recording is input from outside: its bytes say how much to read, inflate, allocate and replay. Every such size is
checked against a bound here first, so a hostile or damaged file is one ``RecordingError`` line instead of a
process that blocks, or grows by gigabytes while ignoring Ctrl+C. Each bound sits far above what a real session
needs (docs/recording-format.md, "Limits"); the two a very long or very large session could reach have an
environment override.
"""

from __future__ import annotations

import math
import os

MIB = 2**20
MAX_RECORD_BYTES = 64 * MIB    # one record's payload, stored and inflated (a zlib bomb stops here; decoding
                               # 64 MiB of msgpack or JSON into Python objects takes up to ~10x that in memory)
MAX_SESSION_S = 1e9            # any time in a file, seconds since the start (a time is finite and in [0, this])
MAX_LAYERS = 4096              # layers of a recorded pool (the largest models have a few hundred)
MAX_OPS = 2**48                # op numbers (an op_index past this is not a count of anything recorded)
DEFAULT_FILE_MIB = 512         # a one-hour session at 10 Hz is 23 MB (docs/recording-format.md)
DEFAULT_REPLAY_ROWS = 2**22    # pool rows, all layers together (a keyframe of that many rows is ~60 MB); an
                               # 8B-class model's K/V filling an H200 is ~1.1e6 rows


def _env_int(name: str, default: int) -> int:
    """A positive integer from the environment (a malformed value falls back to the default)."""
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


def max_file_bytes() -> int:
    """Largest session file read (``SLABSCOPE_MAX_RECORDING_MIB`` overrides the 512 MiB default)."""
    return _env_int("SLABSCOPE_MAX_RECORDING_MIB", DEFAULT_FILE_MIB) * MIB


def max_replay_rows() -> int:
    """Most pool rows (all layers together) a keyframe or a replay may hold (``SLABSCOPE_MAX_REPLAY_ROWS``)."""
    return _env_int("SLABSCOPE_MAX_REPLAY_ROWS", DEFAULT_REPLAY_ROWS)


def rows_per_layer(num_layers: int) -> int:
    """The replay bound on one layer's rows for a pool of ``num_layers`` layers."""
    return max(1, max_replay_rows() // max(1, num_layers))


def time_problem(t: object) -> str | None:
    """Why ``t`` is not a time a session file may hold (None when it is one)."""
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return f"time {t!r} is not a number"
    if not math.isfinite(t):
        return f"time {t} is not finite"
    if not 0.0 <= t <= MAX_SESSION_S:
        return f"time {t:g} s is outside [0, {MAX_SESSION_S:g}] s"
    return None
