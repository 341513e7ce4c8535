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
from probes import outfile
from probes.errors import RecordingError
from probes.recording import new_session_id
from probes.replay import Session


class Migration(NamedTuple):
    before: int        # bytes of the source
    after: int         # bytes of the copy
    from_version: int  # the source's format


def migrate(src: str | os.PathLike, dst: str | os.PathLike, force: bool = False) -> Migration:
    """Write ``src`` (format v1 or v2) as ``dst`` (the current format); returns the sizes and the source's format.
    The copy is written to a temporary file beside ``dst``, checked against the original, synced and only then
    given ``dst``'s name (``probes.outfile.write_atomically``): ``dst`` is never ``src`` (symlinks and hard links
    included), an existing ``dst`` is replaced only with ``force``, and a failure leaves ``dst`` as it was.
    ``RecordingError`` when ``src`` is not a readable older recording or the copy does not reproduce it;
    ``OutputError`` when ``dst`` is refused or cannot be written."""
    outfile.check_target(dst, force, inputs=[src])  # before any work
    image = fmt.FileImage(src)
    if image.version >= fmt.FORMAT_VERSION:
        raise RecordingError(src, f"is format v{image.version}: only older recordings (v1, v2) are migrated")
    if image.damage is not None:
        raise RecordingError(src, f"{image.damage}; only intact recordings are migrated")
    original = Session(image)
    if original.damage is not None:  # an impossible value found while decoding (probes.bounds)
        raise RecordingError(src, f"{original.damage}; only intact recordings are migrated")
    meta = dict(original.meta, session_id=new_session_id(), migrated_from_format=image.version,
                format_version=fmt.FORMAT_VERSION)
    if original.geometry is not None:  # v2+ keeps the pool geometry in META (a v1 file named it in its snapshots)
        meta["geometry"] = msgspec.to_builtins(original.geometry)
    records = [(fmt.META, 0.0, codec.encode(meta))]
    for ref in image.refs[1:]:
        payload = codec.decode(image, ref)
        records.append((ref.kind, ref.t, codec.encode(payload.events if ref.kind == fmt.EVENTS else payload)))
    blob = fmt.encode_file(records, meta["session_id"])

    def write_and_check(temp: str) -> None:
        with open(temp, "wb") as out:
            out.write(blob)
        _check_same(original, Session.open(temp), os.fspath(dst))

    outfile.write_atomically(dst, write_and_check, force=force, inputs=[src])
    return Migration(len(image.data), len(blob), image.version)


def _check_same(a: Session, b: Session, name: str) -> None:
    checks = {"samples": _columns(a) == _columns(b), "events": a.events == b.events, "snapshot summaries": a.snapshots == b.snapshots,
              "op log": a.all_ops() == b.all_ops(), "end": a.summary == b.summary,
              "pool": all(a.snapshot_at(s.t) == b.snapshot_at(s.t) for s in a.snapshots)}
    broken = [name for name, ok in checks.items() if not ok]
    if broken:
        raise RecordingError(name, f"the migrated copy differs from the original in: {', '.join(broken)}")


def _columns(session: Session) -> dict:
    window = session.samples.window()
    return {name: getattr(window, name) for name in codec.SAMPLE_FIELDS}
