"""Recording fuzz: seeded random damage to valid session files, read through every reader path.

Each case takes a valid recording (v1 and v2, with and without a pool), damages it one way (truncate, flip bytes,
zero a range or the tail, append zeros or garbage, duplicate / drop / reorder records, splice in another session's
records or random bytes, random bytes after the file header, damage a length field, inflate a record into a zlib bomb, or re-encode one record with a
hostile value in a random field: NaN, infinity, negative or huge numbers, strings, nulls) or replaces it by a
special file (FIFO, /dev/zero, a directory, a sparse GiB, a file over the size limit), then opens it with
``Session.open`` and runs every query, compare (a rank recording: merged with its other rank), what-if with its
sizing, export's trace (and, for some cases, the Markdown report).

Outcome classes (``FuzzTally``):

* ``clear error``: a one-line ``RecordingError`` (or ``ReplayError`` from what-if), at open or from a lazily
  decoded record;
* ``prefix recovered``: the file opened on a prefix of its records (damage reported with its offset, a torn tail, or
  a cut at a record boundary: then ``complete`` is False), and everything read equals what the original file's
  same prefix gives;
* ``identical``: the file opened intact and everything read equals the original's;
* ``accepted value``: a ``content`` edit (one field of a CRC-valid record set to a hostile value) read as written,
  with nothing crashing. The fuzz does not judge whether the value is plausible where it landed: every silent
  change of a ``content`` case is counted here, with its record kind and value in ``FuzzTally.accepted`` (in CI
  at 2298d6d: 0 in a sample, 2^63-1 in a sample and in an event, -2^63 in the metadata), so a reader that takes an
  implausible value is listed, not failed. Other mutations' silent changes fail;
* ``v1 undetectable``: a v1 file (no record numbers, no session tag) with a record dropped or another session's
  record spliced in whose times fit; docs/recording-format.md lists what v1 cannot detect.

Failures (must stay 0): a crash (any other exception), a hang (a case over ``CASE_SECONDS``), runaway memory (peak
RSS growing by more than ``MEMORY_STEP`` in one case), or a silent change (a v2 file opened without damage whose
results differ from the original's).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import resource
import signal
import warnings
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from recording_craft import RawRecord, build, edited, parse

from probes import format as fmt
from probes import figures, limits
from probes.compare import compare_sessions, format_table
from probes.errors import RecordingDamage, RecordingError, ReplayError
from probes.events import Step
from probes.ranks import RankMergeError
from probes.replay import Session
from probes.trace_chrome import chrome_events
from probes.trace_export import trace_processes
from probes.whatif import mismatches_with_recording, run_whatif
from app.commands.whatif_sizing import sizing

SIZING_ARGS = argparse.Namespace(slab_blocks=3, block_size=8, design=None, max_buffer=None, memory=None,
                                 shrink="compact", shrink_budget=None)  # sizing under another policy too
CASE_SECONDS = 20.0
MEMORY_STEP = 1024 * limits.MIB
HOSTILE = [math.nan, math.inf, -math.inf, -1, -(2**63), 2**63 - 1, 10**12, 1e300, -1e300, "lots", None, [], {},
           True, 0, 0.5, [[1, 2]], {"x": 1}]
MUTATIONS = ("truncate", "flip", "zero_range", "zero_tail", "append_zeros", "append_garbage", "duplicate", "drop",
             "reorder", "reverse", "splice_foreign", "append_foreign", "splice_garbage", "length_field", "content",
             "content", "content", "random_body", "bomb", "special")
SPECIAL = ("fifo", "dev_zero", "directory", "sparse", "oversize", "empty")


class Hang(Exception):
    pass


@dataclass
class FuzzTally:
    counts: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    by_mutation: Counter = field(default_factory=Counter)
    accepted: Counter = field(default_factory=Counter)  # (record kind, hostile value) read as written

    def add(self, outcome: str, mutation: str, detail: str = "") -> None:
        self.counts[outcome] += 1
        self.by_mutation[(mutation, outcome)] += 1
        if outcome in ("crash", "hang", "runaway memory", "silent change", "not one line"):
            self.failures.append(f"{outcome} [{mutation}] {detail}")

    def line(self) -> str:
        order = ("clear error", "prefix recovered", "identical", "accepted value", "v1 undetectable", "crash", "hang",
                 "runaway memory", "silent change", "not one line")
        return f"{sum(self.counts.values())} cases: " + ", ".join(f"{self.counts[k]} {k}" for k in order)


# ---- what the readers give --------------------------------------------------------------------------------------
def fingerprint(session: Session, report_dir: Path | None = None, partner: Session | None = None) -> dict:
    """Everything the readers compute from ``session``: the read model's content and every query, compare and
    what-if (both raise RecordingError/ReplayError for a malformed lazily read part); with ``partner`` (the other
    rank of a rank recording), compare's merged view of the two ranks (RankMergeError: one line)."""
    window = session.samples.window()
    end = session.duration
    instants = sorted({0.0, end / 3, end / 2, end, *(k.t for k in session.keyframes)})
    out = {
        "meta": session.meta, "samples": {name: getattr(window, name) for name in ("t", "footprint", "rss", "step")},
        "events": list(session.events), "snapshots": list(session.snapshots), "summary": session.summary,
        "duration": end, "phases": session.phases(), "phase": [session.phase_at(t) for t in instants],
        "peak": session.peak(), "peak_window": session.peak("rss", 0.0, end / 2), "tok_s": figures.tok_s(session, "decode"),
        "frames": [session.frame_at(t) for t in instants], "steps": list(session.iter_steps())[:50],
        "history": session.history(end, limit=-20), "time_of_step": session.time_of_step(3),
        "pool": (session.is_pool, session.geometry, session.overhead, session.dropped_batches),
        "events_between": session.events_between(0.0, end, Step),
        "snapshot_at": [session.snapshot_at(t) for t in instants],
        "ops_between": session.ops_between(0.0, end / 2), "ops": session.all_ops(),
    }
    rows = compare_sessions([session])
    out["compare"] = (rows, format_table(rows))
    assert session.status in ("done", "stopped", "running", "error", "damaged")  # says intact or not: not compared
    if partner is not None:
        from app.commands.compare_ranks import merged, render

        view = merged([session, partner])
        render(view)  # its rank lines say intact, incomplete or damaged: not compared
        out["ranks"] = (view["rows"], view["imbalance"], view["outputs"], view["rank_output_failures"])
    if session.is_pool and session.all_ops():
        recorded = run_whatif(session)
        out["whatif"] = (recorded.summary(), mismatches_with_recording(session, recorded),
                         run_whatif(session, slab_blocks=3, block_size=8).summary(),
                         sizing(session, SIZING_ARGS).to_json())
    out["export"] = [chrome_events(p) for p in trace_processes([(session, "fuzz.slabrec")])]  # one name: compared
    if report_dir is not None:
        from probes.report import write_report

        Path(write_report([session], str(report_dir))).read_text()  # its table says intact or not: not compared
    return out


# ---- damage -----------------------------------------------------------------------------------------------------
def record_spans(blob: bytes) -> list[tuple[int, int]]:
    """(start, end) byte spans of a valid file's records."""
    version = fmt.FILE_HEADER.unpack_from(blob, 0)[1]
    header = fmt.RECORD_HEADER if version >= 2 else fmt.RECORD_HEADER_V1
    pos, spans = fmt.FILE_HEADER.size, []
    while pos < len(blob):
        length = header.unpack_from(blob, pos)[3]
        spans.append((pos, pos + header.size + length))
        pos += header.size + length
    return spans


class Mutator:
    """Damage of one kind to a valid file's bytes. ``donor`` is another session's file of the same format."""

    def __init__(self, rng: random.Random, bomb: bytes) -> None:
        self.rng = rng
        self.bomb_bytes = bomb
        self.last = ""  # what the last content mutation wrote where

    def apply(self, mutation: str, blob: bytes, donor: bytes) -> bytes:
        return getattr(self, mutation)(blob, donor)

    def _records(self, blob: bytes) -> tuple[bytes, list[bytes]]:
        spans = record_spans(blob)
        return blob[:fmt.FILE_HEADER.size], [blob[a:b] for a, b in spans]

    def truncate(self, blob, donor):
        return blob[:self.rng.randrange(len(blob) + 1)]

    def flip(self, blob, donor):
        out = bytearray(blob)
        for _ in range(self.rng.randint(1, 4)):
            out[self.rng.randrange(len(out))] ^= self.rng.randint(1, 255)
        return bytes(out)

    def zero_range(self, blob, donor):
        start = self.rng.randrange(fmt.FILE_HEADER.size, len(blob))
        length = self.rng.randint(1, 4096)
        return blob[:start] + b"\0" * min(length, len(blob) - start) + blob[start + length:]

    def zero_tail(self, blob, donor):
        n = self.rng.randint(1, len(blob) - fmt.FILE_HEADER.size)
        return blob[:-n] + b"\0" * n

    def append_zeros(self, blob, donor):
        return blob + b"\0" * self.rng.choice([1, 7, 28, 4096, 65536])

    def append_garbage(self, blob, donor):
        return blob + self.rng.randbytes(self.rng.randint(1, 2000))

    def duplicate(self, blob, donor):
        head, recs = self._records(blob)
        i = self.rng.randrange(1, len(recs))
        at = self.rng.randint(i, len(recs))
        return head + b"".join(recs[:at] + [recs[i]] + recs[at:])

    def drop(self, blob, donor):
        head, recs = self._records(blob)
        i = self.rng.randrange(1, len(recs))
        return head + b"".join(recs[:i] + recs[i + 1:])

    def reorder(self, blob, donor):
        head, recs = self._records(blob)
        i, j = sorted(self.rng.sample(range(1, len(recs)), 2))
        recs[i], recs[j] = recs[j], recs[i]
        return head + b"".join(recs)

    def reverse(self, blob, donor):
        head, recs = self._records(blob)
        i, j = sorted(self.rng.sample(range(1, len(recs) + 1), 2))
        return head + b"".join(recs[:i] + recs[i:j][::-1] + recs[j:])

    def splice_foreign(self, blob, donor):
        head, recs = self._records(blob)
        _, theirs = self._records(donor)
        at = self.rng.randint(1, len(recs))
        k = self.rng.randrange(1, len(theirs))
        return head + b"".join(recs[:at] + theirs[k:k + self.rng.randint(1, 3)] + recs[at:])

    def append_foreign(self, blob, donor):
        return blob + donor[fmt.FILE_HEADER.size:]

    def random_body(self, blob, donor):
        """The file header, then random bytes (sometimes starting like a record)."""
        body = self.rng.randbytes(self.rng.randint(0, 300))
        return blob[:fmt.FILE_HEADER.size] + (fmt.RECORD_MARKER if self.rng.random() < 0.5 else b"") + body

    def splice_garbage(self, blob, donor):
        at = self.rng.randrange(fmt.FILE_HEADER.size, len(blob) + 1)
        return blob[:at] + self.rng.randbytes(self.rng.randint(1, 64)) + blob[at:]

    def length_field(self, blob, donor):
        spans = record_spans(blob)
        start, _ = self.rng.choice(spans)
        value = self.rng.choice([0, 1, self.rng.randrange(2**16), self.rng.randrange(2**32), len(blob) * 2])
        return blob[:start + 4] + value.to_bytes(4, "little") + blob[start + 8:]

    def bomb(self, blob, donor):
        """A CRC-valid record whose payload inflates past the limit, in place of a random record."""
        version, recs = parse(blob)
        i = self.rng.randrange(1, len(recs))
        header = fmt.RECORD_HEADER if version >= 2 else fmt.RECORD_HEADER_V1
        fields = (fmt.RECORD_MARKER, recs[i].kind, fmt.FLAG_ZLIB, len(self.bomb_bytes))
        fields += (recs[i].seq, recs[i].tag) if version >= 2 else ()
        head = header.pack(*fields, recs[i].t, 0)[:-4]
        bomb_record = head + zlib.crc32(self.bomb_bytes, zlib.crc32(head)).to_bytes(4, "little") + self.bomb_bytes
        spans = record_spans(blob)
        a, b = spans[i]
        return blob[:a] + bomb_record + blob[b:]

    def content(self, blob, donor):
        """One record re-encoded (valid CRC, same number and tag) with a hostile value in one random field."""
        version, recs = parse(blob)
        i = self.rng.randrange(len(recs))
        payload = msgspec.msgpack.decode(msgspec.msgpack.encode(recs[i].payload)) if version >= 2 else \
            _json_copy(recs[i].payload)
        value = self.rng.choice(HOSTILE)
        payload = _replace_random_leaf(self.rng, payload, value)
        self.last = f"{fmt.KIND_NAMES[recs[i].kind]}: {value!r}"
        recs[i] = edited(recs[i], payload, t=recs[i].t if self.rng.random() < 0.8 else self.rng.choice(HOSTILE[:8]))
        return build(version, recs, renumber=False) if _finite_header(recs) else _raw_header_time(version, recs)


def _json_copy(obj):
    import json

    return json.loads(json.dumps(obj, allow_nan=True))


def _finite_header(recs: list[RawRecord]) -> bool:
    return all(isinstance(r.t, (int, float)) for r in recs)


def _raw_header_time(version: int, recs: list[RawRecord]) -> bytes:
    """Header times that are not numbers become NaN (a header holds an f64)."""
    fixed = [r if isinstance(r.t, (int, float)) else RawRecord(r.kind, math.nan, r.payload, r.seq, r.tag, r.raw)
             for r in recs]
    return build(version, fixed, renumber=False)


def _replace_random_leaf(rng: random.Random, obj, value):
    """``obj`` with one randomly chosen scalar (or container) replaced by ``value``."""
    if isinstance(obj, dict) and obj and rng.random() < 0.9:
        key = rng.choice(list(obj))
        obj[key] = _replace_random_leaf(rng, obj[key], value)
        return obj
    if isinstance(obj, list) and obj and rng.random() < 0.9:
        i = rng.randrange(len(obj))
        obj[i] = _replace_random_leaf(rng, obj[i], value)
        return obj
    return value


def make_special(kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.slabrec"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(2**30)
    elif kind == "oversize":
        with open(path, "wb") as fh:
            fh.write(fmt.FILE_HEADER.pack(fmt.MAGIC, 2, 0))
            fh.truncate(limits.max_file_bytes() + 1)
    else:
        path.write_bytes(b"")
    return path


def make_bomb() -> bytes:
    """zlib data (~260 KB) that inflates to 1 MiB more than the per-record limit."""
    squeeze = zlib.compressobj(9)
    chunk = b"\0" * (16 * limits.MIB)
    parts = [squeeze.compress(chunk) for _ in range((limits.MAX_RECORD_BYTES + limits.MIB) // len(chunk) + 1)]
    return b"".join(parts) + squeeze.flush()


# ---- one case ----------------------------------------------------------------------------------------------------
@dataclass
class Base:
    name: str
    blob: bytes
    donor: bytes
    version: int
    records: int
    partner: Path | None = None  # a rank recording's other rank (intact): compare merges the two
    prints: dict = field(default_factory=dict)  # number of records kept -> fingerprint of that prefix

    def prefix_print(self, folder: Path, kept: int) -> dict:
        if kept not in self.prints:
            spans = record_spans(self.blob)
            path = folder / f"prefix-{self.name}-{kept}.slabrec"
            path.write_bytes(self.blob[:spans[kept - 1][1]])
            self.prints[kept] = fingerprint(Session.open(path), partner=self.open_partner())
            path.unlink()
        return self.prints[kept]

    def open_partner(self) -> Session | None:
        return Session.open(self.partner) if self.partner is not None else None


def _alarm(signum, frame):
    raise Hang()


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_case(rng: random.Random, base: Base, mutation: str, mutator: Mutator, folder: Path,
             tally: FuzzTally, report: bool = False) -> None:
    """Damage ``base`` one way, read it every way, count the outcome."""
    if mutation == "special":
        kind = rng.choice(SPECIAL)
        path, label, detail = make_special(kind, folder), f"special:{kind}", kind
    else:
        path, label = folder / "case.slabrec", mutation
        path.write_bytes(mutator.apply(mutation, base.blob, base.donor))
        detail = f"{base.name}"
    before = _peak_rss()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        outcome, why = _read(path, base, folder, report)
    except Hang:
        outcome, why = "hang", ""
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _remove(path)
    if _peak_rss() - before > MEMORY_STEP:
        outcome = "runaway memory"
    if mutation == "content" and outcome in ("silent change", "v1 undetectable"):
        outcome = "accepted value"  # a CRC-valid record edited to a value no reader can judge wrong
        tally.accepted[mutator.last] += 1
    tally.add(outcome, label, f"{detail} {why}")


def _read(path: Path, base: Base, folder: Path, report: bool) -> tuple[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordingDamage)
        try:
            session = Session.open(path)
            got = fingerprint(session, folder / "report" if report else None, base.open_partner())
        except (RecordingError, ReplayError, RankMergeError) as exc:
            return ("clear error" if "\n" not in str(exc) else "not one line"), str(exc)[:200]
        except Hang:
            raise
        except Exception as exc:  # noqa: BLE001 - every other exception is the failure being counted
            return "crash", f"{type(exc).__name__}: {str(exc)[:200]}"
    kept = session.records_read
    if session.damage is None and session.incomplete_tail_bytes == 0 and kept == base.records:
        same = got == base.prefix_print(folder, kept)
        return ("identical" if same else _different(base)), ""
    if kept <= base.records and got == base.prefix_print(folder, kept) and not session.complete:
        return "prefix recovered", ""
    return _different(base), f"kept {kept} of {base.records} records, damage: {session.damage}"


def _different(base: Base) -> str:
    return "v1 undetectable" if base.version == 1 else "silent change"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()
