"""Rewriting a format-v1 or v2 recording as the current format (v3), record by record (mlx-free).

Every record is decoded into its typed payload (``probes.codec.decode``, the same path a reader takes: a v1/v2
keyframe's rows per layer are read through layer 0) and written again, same kind, same time, same order, with a
new session id; the copy is then checked against the original (samples, events, snapshot summaries, the op log,
and the pool rebuilt at every snapshot instant). Older files stay readable, so this is optional: v3 files are
smaller (keyframes hold the rows once) and open faster (docs/recording-format.md).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import msgspec

from probes import codec
from probes import format as fmt
from probes.errors import RecordingError
from probes.recording import new_session_id
from probes.replay import Session


class Migration(NamedTuple):
    before: int        # bytes of the source
    after: int         # bytes of the copy
    from_version: int  # the source's format


def migrate(src: str | os.PathLike, dst: str | os.PathLike) -> Migration:
    """Write ``src`` (format v1 or v2) as ``dst`` (the current format); returns the sizes and the source's format.
    RecordingError when ``src`` is not a readable older recording or the copy does not reproduce it (then ``dst``
    is removed)."""
    image = fmt.FileImage(src)
    if image.version >= fmt.FORMAT_VERSION:
        raise RecordingError(src, f"is format v{image.version}: only older recordings (v1, v2) are migrated")
    if image.damage is not None:
        raise RecordingError(src, f"{image.damage}; only intact recordings are migrated")
    original = Session(image)
    meta = dict(original.meta, session_id=new_session_id(), migrated_from_format=image.version,
                format_version=fmt.FORMAT_VERSION)
    if original.geometry is not None:  # v2+ keeps the pool geometry in META (a v1 file named it in its snapshots)
        meta["geometry"] = msgspec.to_builtins(original.geometry)
    records = [(fmt.META, 0.0, codec.encode(meta))]
    for ref in image.refs[1:]:
        payload = codec.decode(image, ref)
        records.append((ref.kind, ref.t, codec.encode(payload.events if ref.kind == fmt.EVENTS else payload)))
    writer = fmt.RecordWriter(dst, meta["session_id"])
    writer.append(records)
    writer.close()
    try:
        _check_same(original, Session.open(dst))
    except RecordingError:
        os.remove(dst)
        raise
    return Migration(len(image.data), os.path.getsize(dst), image.version)


def _check_same(a: Session, b: Session) -> None:
    checks = {"samples": _columns(a) == _columns(b), "events": a.events == b.events, "snapshot summaries": a.snapshots == b.snapshots,
              "op log": a.all_ops() == b.all_ops(), "end": a.summary == b.summary,
              "pool": all(a.snapshot_at(s.t) == b.snapshot_at(s.t) for s in a.snapshots)}
    broken = [name for name, ok in checks.items() if not ok]
    if broken:
        raise RecordingError(b.path, f"the migrated copy differs from the original in: {', '.join(broken)}")


def _columns(session: Session) -> dict:
    window = session.samples.window()
    return {name: getattr(window, name) for name in codec.SAMPLE_FIELDS}
