"""Memory samples stored as columns, safe for one writer thread and any number of reader threads (mlx-free).

The TUI plots and bisects whole series (times, footprints, RSS) several times a second while its ingest thread
appends samples. A row is appended column by column; a reader that sliced one column by another column's length
could see one column a row longer than the other (an IndexError in the chart's decimation, once). So the row count
readers see, ``len(columns)``, is published only after every column of the row is appended, and readers take every
column up to one count read once: ``window = columns.window()``, then ``window.t``, ``window.footprint``, ...
"""

from __future__ import annotations

import bisect

from probes.events import Sample

FIELDS = Sample.__struct_fields__


class SampleWindow:
    """The first ``n`` samples of some columns: ``window.<field>`` is that column's first ``n`` values (a copy,
    made on first access)."""

    def __init__(self, columns: dict[str, list], n: int) -> None:
        self._columns = columns
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getattr__(self, name: str) -> list:
        try:
            column = self._columns[name]
        except KeyError:
            raise AttributeError(f"samples have no field {name!r}") from None
        values = column[:self.n]
        setattr(self, name, values)  # cached: the same window answers the same list again
        return values


class SampleColumns:
    """Owns one list per ``Sample`` field. Mutated only by ``append``/``extend`` (one writer thread)."""

    def __init__(self) -> None:
        self._columns: dict[str, list] = {name: [] for name in FIELDS}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def append(self, sample: Sample, t: float) -> None:
        """Add one sample at time ``t`` (seconds since the session start); visible to readers once complete."""
        for name in FIELDS:
            self._columns[name].append(t if name == "t" else getattr(sample, name))
        self._n += 1  # publish the row only now: every column already holds it

    def extend(self, columns: dict[str, list]) -> None:
        """Add a block of samples given as equally long columns (a recording's SAMPLES record)."""
        rows = len(columns["t"])
        for name in FIELDS:
            self._columns[name].extend(columns[name])
        self._n += rows

    def window(self, n: int | None = None) -> SampleWindow:
        """The first ``n`` samples (all published ones by default), every column cut at the same row."""
        count = self._n if n is None else min(n, self._n)
        return SampleWindow(self._columns, count)

    def index_at(self, t: float | None) -> int:
        """Number of samples at or before ``t`` (all of them for None)."""
        n = self._n
        if t is None:
            return n
        return bisect.bisect_right(self._columns["t"], t, 0, n)

    def index_before(self, t: float) -> int:
        """Number of samples strictly before ``t``."""
        return bisect.bisect_left(self._columns["t"], t, 0, self._n)

    def at(self, i: int) -> Sample:
        """Sample ``i`` as a typed record."""
        if not 0 <= i < self._n:
            raise IndexError(f"sample {i} of {self._n}")
        return Sample(**{name: self._columns[name][i] for name in FIELDS})

    def argmax(self, name: str, lo: int = 0, hi: int | None = None) -> int | None:
        """Index of the largest value of a column in rows ``[lo, hi)`` (the first one on ties), None if empty."""
        hi = self._n if hi is None else min(hi, self._n)
        if lo >= hi:
            return None
        column = self._columns[name]
        return max(range(lo, hi), key=column.__getitem__)
