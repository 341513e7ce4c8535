"""Pure functions that turn pool snapshots (docs/contracts.md §1 schema) and tracks into what the views draw.

No Textual, no mlx: everything here is plain data in, plain data out, unit-tested in tests/tui/test_analysis.py.
Row states: a physical row is ``live`` (refcount 1), ``shared`` (refcount > 1), ``held`` (owned only by a prefix
handle, owner -2) or ``free`` (refcount 0 / owner -1). Rows past a layer's row arrays but inside its capacity are
reserved storage that no block has been minted into yet; they count as free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.tui.data import Track
from probes.meta import memory_model_of

FREE, LIVE, SHARED, HELD = "free", "live", "shared", "held"
HISTORY_LIMIT = 400  # snapshots scanned backwards when asking who freed a run


@dataclass
class SlabCell:
    """Occupancy of one slab of one layer, in rows."""

    capacity: int
    live: int = 0
    shared: int = 0
    held: int = 0

    @property
    def used(self) -> int:
        return self.live + self.shared + self.held

    @property
    def free(self) -> int:
        return self.capacity - self.used

    @property
    def fraction(self) -> float:
        return self.used / self.capacity if self.capacity else 0.0


def rows_per_slab(snap: dict, layer: dict) -> int:
    """Rows in one slab of ``layer`` (monolithic: rows per grow chunk, for display)."""
    num_slabs = max(1, int(layer.get("num_slabs", 1) or 1))
    if snap.get("design") == "slab":
        return max(1, int(snap.get("slab_blocks", 1) or 1))
    return max(1, int(layer.get("capacity_rows", 0) or 0) // num_slabs)


def row_state(owner: int, refcount: int) -> str:
    """State of one physical row from its owner and refcount."""
    if refcount <= 0 or owner == -1:
        return FREE
    if owner == -2:
        return HELD
    return SHARED if refcount > 1 else LIVE


def slab_cells(snap: dict, layer: dict) -> list[SlabCell]:
    """Per-slab occupancy of one layer."""
    per = rows_per_slab(snap, layer)
    cells = [SlabCell(per) for _ in range(int(layer.get("num_slabs", 0) or 0))]
    owners = layer.get("row_owner", []) or []
    refs = layer.get("row_refcount", []) or []
    for row, (owner, ref) in enumerate(zip(owners, refs)):
        slab = row // per
        if slab >= len(cells):
            cells.extend(SlabCell(per) for _ in range(slab + 1 - len(cells)))
        state = row_state(owner, ref)
        if state == LIVE:
            cells[slab].live += 1
        elif state == SHARED:
            cells[slab].shared += 1
        elif state == HELD:
            cells[slab].held += 1
    return cells


@dataclass
class PoolTotals:
    """Totals over every layer of one snapshot."""

    slabs: int
    live_rows: int
    shared_rows: int
    held_rows: int
    free_rows: int
    bytes_reserved: int
    bytes_in_use: int


def pool_totals(snap: dict) -> PoolTotals:
    """Slabs, rows by state and bytes over all layers of ``snap``."""
    slabs = live = shared = held = free = 0
    for layer in snap.get("layers", []) or []:
        for cell in slab_cells(snap, layer):
            slabs += 1
            live += cell.live
            shared += cell.shared
            held += cell.held
            free += cell.free
    stats = snap.get("stats", {}) or {}
    return PoolTotals(slabs, live, shared, held, free, int(stats.get("bytes_reserved", 0) or 0),
                      int(stats.get("bytes_in_use", 0) or 0))


def free_runs(layer: dict) -> list[tuple[int, int]]:
    """Maximal runs of free rows as (first_row, length), over the layer's whole capacity."""
    owners = layer.get("row_owner", []) or []
    refs = layer.get("row_refcount", []) or []
    capacity = max(int(layer.get("capacity_rows", 0) or 0), len(owners))
    runs: list[tuple[int, int]] = []
    start = None
    for row in range(capacity):
        is_free = row >= len(owners) or row_state(owners[row], refs[row] if row < len(refs) else 0) == FREE
        if is_free and start is None:
            start = row
        elif not is_free and start is not None:
            runs.append((start, row - start))
            start = None
    if start is not None:
        runs.append((start, capacity - start))
    return runs


def gather_runs(rows: list[int], per_slab: int) -> list[tuple[int, int]]:
    """A sequence's rows (logical order) split into maximal same-slab runs: (slab, number of rows) per run."""
    runs: list[tuple[int, int]] = []
    for row in rows:
        slab = row // per_slab
        if runs and runs[-1][0] == slab:
            runs[-1] = (slab, runs[-1][1] + 1)
        else:
            runs.append((slab, 1))
    return runs


def runs_per_sequence(snap: dict) -> dict[int, int]:
    """Gather runs each sequence's next gather takes (from layer-0 rows; the monolithic design always takes 1)."""
    layers = snap.get("layers", []) or [{}]
    per = rows_per_slab(snap, layers[0]) if layers else 1
    out: dict[int, int] = {}
    for seq, rows in (snap.get("seq_rows", {}) or {}).items():
        out[int(seq)] = 1 if snap.get("design") != "slab" else max(1, len(gather_runs(rows, per))) if rows else 0
    return out


def merged_gather_hist(snap: dict) -> dict[int, int]:
    """Histogram runs-per-gather -> count, summed over layers (the pool's own counts)."""
    hist: dict[int, int] = {}
    for layer in snap.get("layers", []) or []:
        for runs, count in (layer.get("gather_runs_hist", {}) or {}).items():
            hist[int(runs)] = hist.get(int(runs), 0) + int(count)
    return hist


def next_request_need(snap: dict, track: Track | None = None) -> int:
    """Blocks the next request needs: the scenario's announced size when the run says it, else the longest live
    sequence's block count (a request like the biggest one now)."""
    block = max(1, int(snap.get("block_size", 1) or 1))
    if track is not None:
        for src in (track.last_sample, track.meta):
            tokens = src.get("next_request_tokens")
            if isinstance(tokens, int) and tokens > 0:
                return math.ceil(tokens / block)
    lengths = [len(rows) for rows in (snap.get("seq_rows", {}) or {}).values()]
    return max(lengths, default=1) or 1


def fragmentation_index(free: int, largest: int) -> float:
    """1 - largest_free_run / free_rows (0 when nothing is free): 0 = one hole, near 1 = scattered rows."""
    return 0.0 if free <= 0 else 1.0 - largest / free


@dataclass
class AccountingPart:
    label: str
    bytes: float


def accounting(track: Track, sample_index: int, snap: dict | None) -> list[AccountingPart]:
    """Split one sample's memory into weights, pool live, pool reserved-free, other active, MLX cache and the rest
    of RSS that MLX does not explain. Uses the probes' own split (signed: a negative remainder is shown, never
    clamped); computes it from the snapshot and meta only for samples that lack it (older or foreign streams)."""
    s = track.samples
    if sample_index <= 0 or not len(s):
        return []
    i = min(sample_index, len(s)) - 1
    raw = s.raw[i] if i < len(s.raw) else {}
    discrete = memory_model_of(track.meta) == "discrete"
    host = s.rss[i] if discrete else None  # CUDA: MLX memory lives on the device, RSS is host memory alone
    if all(k in raw for k in ("weights", "pool_live", "pool_free", "other_active", "rss_other")):
        return _parts(raw["weights"], raw["pool_live"], raw["pool_free"], raw["other_active"], s.cache[i],
                      raw["rss_other"] if host is None else host, discrete=discrete)
    weights = float(track.meta.get("weight_bytes", 0) or 0)
    stats = (snap or {}).get("stats", {}) or {}
    live = float(stats.get("bytes_in_use", 0) or 0)
    reserved_free = float(stats.get("bytes_reserved", 0) or 0) - live
    other = s.active[i] - weights - live - reserved_free
    rest = s.rss[i] - s.active[i] - s.cache[i] if host is None else host
    return _parts(weights, live, reserved_free, other, s.cache[i], rest, discrete=discrete)


def _parts(*values: float, discrete: bool = False) -> list[AccountingPart]:
    """Labels in display order; on a discrete GPU the last part is the host RSS (not part of the device footprint)."""
    last = "host RSS (not on GPU)" if discrete else "unexplained RSS"
    labels = ("weights", "pool live", "pool reserved-free", "other active", "MLX cache", last)
    return [AccountingPart(label, float(v)) for label, v in zip(labels, values)]


@dataclass
class FreeRunOrigin:
    """Who last held a free run and when it was freed. ``seq`` None: no kept snapshot shows it in use."""

    seq: int | None
    last_owned: float | None  # latest snapshot time showing the rows in use
    seen_free: float | None  # earliest later time known free (a snapshot, or the inspected moment)
    op: str = ""  # the freeing op from the op log ("release", "trim", "detach"), '' when unknown
    op_t: float | None = None  # its exact time

    def describe(self) -> str:
        if self.seq is None:
            return "never used in the kept history (reserved capacity not yet minted, or freed before it)"
        if self.op and self.op_t is not None:
            return f"freed by seq {self.seq}'s {self.op} at {self.op_t:.2f}s"
        return f"last owned by seq {self.seq} at {self.last_owned:.2f}s, free by {self.seen_free:.2f}s"


def free_run_origin(track: Track, layer_index: int, first_row: int, length: int,
                    before: float | None) -> FreeRunOrigin:
    """Which sequence last owned rows [first_row, first_row+length) of a layer and when it freed them: scans the
    track's snapshots backwards from ``before`` (the inspected moment) to the last one where a row was in use, then
    looks the freeing op up in the op log between that snapshot and the moment the rows were seen free."""
    rows = set(range(first_row, first_row + length))
    seen_free = before
    for t, _step, snap in reversed(track.history(before, limit=HISTORY_LIMIT, full=True)):
        layers = snap.get("layers", []) or []
        if layer_index >= len(layers):
            continue
        owners = layers[layer_index].get("row_owner", []) or []
        holders = [owners[r] for r in rows if r < len(owners) and owners[r] >= 0]
        if holders:
            seq = max(set(holders), key=holders.count)
            op, op_t = _freeing_op(track, seq, t, seen_free)
            return FreeRunOrigin(seq, t, seen_free if seen_free is not None else t, op, op_t)
        seen_free = t
    return FreeRunOrigin(None, None, None)


def _freeing_op(track: Track, seq: int, after: float, until: float | None) -> tuple[str, float | None]:
    """The op that released ``seq``'s rows in (after, until], from the op log ('' when not found)."""
    for t, op in track.ops:
        if t < after or (until is not None and t > until):
            continue
        if op.get("seq") == seq and op.get("op") in ("release", "trim", "detach"):
            return str(op["op"]), t
    return "", None
