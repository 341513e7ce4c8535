"""Record payloads: the typed records each record kind holds, and the one place they are encoded and decoded.

Format v3 payloads are msgpack of these Structs (``encode``); ``decode`` turns a record of any format into them:
v2's msgpack differs only in its keyframes, which held the rows once per layer (``probes.legacy`` reads them through
layer 0), and v1's JSON dicts go through ``probes.v1``. Every way a payload can be malformed (undecodable bytes, a wrong
type, a missing field, an unknown op or event kind, an inconsistent book state, and what ``probes.checks`` and
``probes.block_checks`` find:
a time that is not a session time, a NaN, a size past ``probes.limits``) ends here as one ``RecordingError`` line
naming the file, the record kind and its byte offset: readers never see another exception. A figure outside its
physical bound (``probes.bounds``) is an ``ImpossibleRecord``, the reader's damage.

Payloads per record kind (times are seconds since the session start):

* META: a dict (``Meta`` checks the fields slabscope itself reads: ``session_id``, ``t_start``, ``geometry``)
* SAMPLES: ``SampleBlock``: one column per ``Sample`` field
* EVENTS: a list of timeline events (and ``MetaUpdate`` for metadata added after the start); read as
  ``DecodedEvents`` (kinds unknown to this slabscope are counted and skipped)
* OPS: ``OpsRecord``: consecutive ops from op number ``first``, each with its time
* SNAPSHOTS: a list of ``SnapshotRecord`` (snapshot summaries: no per-row arrays)
* KEYFRAME: ``KeyframeRecord`` (the full snapshot and the bookkeeping state)
* END: ``EndRecord``
"""

from __future__ import annotations

import json
from typing import Any, Union

import msgspec

from pool import AnyOp, BookState, PoolConfig, PoolError, PoolSnapshot
from probes import block_checks, checks
from probes import format as fmt
from probes.bounds import DEFAULT_BOUNDS, FigureBounds, ImpossibleValue
from probes.errors import ImpossibleRecord, RecordingError
from probes.events import MetaUpdate, Sample, timeline_types
from probes.legacy import KeyframeRecordV2, book_state_from_layers, snapshot_from_layers
from probes.v1 import adapted_snapshot, book_state_from_v1, events_from_v1, ops_from_v1, snapshot_from_v1

SAMPLE_FIELDS = Sample.__struct_fields__

class Meta(msgspec.Struct, frozen=True):
    """The metadata fields slabscope reads itself (the META dict holds many more: versions, model, scenario...)."""

    t_start: float = 0.0
    session_id: str | None = None  # None: a v1 recording (no session id)
    geometry: PoolConfig | None = None  # None: no pool (dense), or a v1 recording (see SessionModel.geometry)
    sample_hz: float | None = None
    snapshot_hz: float | None = None


class SampleBlock(msgspec.Struct, frozen=True):
    """Samples as columns (``columns[field][i]`` of sample i): compact and what the read model stores. None only
    in a column whose field may be unrecorded (a ``Sample`` field that defaults to None)."""

    columns: dict[str, list[Union[int, float, None]]]


class OpsRecord(msgspec.Struct, frozen=True):
    first: int  # number of the first op (ops are numbered from 0 over the whole session)
    t: list[float]
    ops: list[AnyOp]


class SnapshotRecord(msgspec.Struct, frozen=True):
    """A pool snapshot at ``t``; ``op_index`` ops happened before it."""

    t: float
    step: int
    tokens: int
    op_index: int
    snapshot: PoolSnapshot


class KeyframeRecord(SnapshotRecord, frozen=True):
    """A full snapshot (row arrays once: every layer holds the same rows) and the bookkeeping's state."""

    book_state: BookState | None = None

    @classmethod
    def from_layers(cls, old: KeyframeRecordV2) -> "KeyframeRecord":
        """A keyframe of format v1 or v2 (rows once per layer), read through layer 0 (``probes.legacy``)."""
        state = None if old.book_state is None else book_state_from_layers(old.book_state)
        return cls(old.t, old.step, old.tokens, old.op_index, snapshot_from_layers(old.snapshot), state)


class EndRecord(msgspec.Struct, frozen=True):
    t: float
    summary: dict[str, Any]


class DecodedEvents(msgspec.Struct, frozen=True):
    """An EVENTS record as read: its events, and how many of each kind this slabscope does not know (written by a
    newer one; skipped, never guessed at)."""

    events: list
    skipped: dict[str, int]


class _Kind(msgspec.Struct):
    kind: str = ""


_ENCODER = msgspec.msgpack.Encoder()
_DECODERS: dict[tuple, msgspec.msgpack.Decoder] = {}


def encode(payload: object) -> bytes:
    return _ENCODER.encode(payload)


def _msgpack_type(kind: int, version: int):
    """The typed payload of a msgpack record (format v2 and later) of ``kind``."""
    if kind == fmt.EVENTS:
        return list[Union[(*timeline_types(), MetaUpdate)]]
    if kind == fmt.KEYFRAME and version == 2:
        return KeyframeRecordV2
    return {fmt.META: dict[str, Any], fmt.SAMPLES: SampleBlock, fmt.OPS: OpsRecord,
            fmt.SNAPSHOTS: list[SnapshotRecord], fmt.KEYFRAME: KeyframeRecord, fmt.END: EndRecord}[kind]


def decode(image: fmt.FileImage, ref: fmt.RecordRef, bounds: FigureBounds = DEFAULT_BOUNDS):
    """The typed payload of one record (see the module docstring); ``RecordingError`` if it is malformed,
    ``ImpossibleRecord`` (a ``RecordingError``: damage at the record's start) if a figure in it is outside its
    physical bound (``probes.bounds``; ``bounds``: the session's, from its metadata)."""
    raw = image.payload(ref)
    try:
        if image.version >= 2 and ref.kind == fmt.EVENTS:
            payload = _events_v2(raw)
        elif image.version >= 2:
            payload = _decoder(ref.kind, image.version).decode(raw)
            if isinstance(payload, KeyframeRecordV2):
                payload = KeyframeRecord.from_layers(payload)
        else:
            payload = _from_v1(ref.kind, json.loads(raw))
        if ref.kind == fmt.META:
            meta_of(payload)
            return payload
        if ref.kind == fmt.END:
            block_checks.check_end(payload)
            return payload
        if ref.kind == fmt.EVENTS:  # metadata added later is checked like the META record it merges into
            for event in payload.events:
                if isinstance(event, MetaUpdate):
                    meta_of(event.meta)
        return checks.check_record(ref.kind, payload, ref.t, bounds)
    except ImpossibleValue as exc:
        start = ref.offset - (fmt.RECORD_HEADER if image.version >= 2 else fmt.RECORD_HEADER_V1).size
        raise ImpossibleRecord(image.path, start, f"{fmt.KIND_NAMES[ref.kind]} record at byte {start} holds an "
                                                  f"impossible value ({exc})") from None
    except (msgspec.ValidationError, msgspec.DecodeError, PoolError, ValueError, TypeError, KeyError, IndexError,
            AttributeError, RecursionError, OverflowError) as exc:
        problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RecordingError(image.path, f"malformed {fmt.KIND_NAMES[ref.kind]} record at byte {ref.offset}: "
                                         f"{problem}") from None


def _decoder(kind: int, version: int = fmt.FORMAT_VERSION) -> msgspec.msgpack.Decoder:
    key = (kind, version if kind == fmt.KEYFRAME else None)
    decoder = _DECODERS.get(key)
    if decoder is None:
        decoder = _DECODERS[key] = msgspec.msgpack.Decoder(_msgpack_type(kind, version))
    return decoder


def _events_v2(raw: bytes) -> DecodedEvents:
    """One typed decode of the whole list; when that fails, item by item, skipping kinds this slabscope does not
    know (a malformed item of a known kind still fails)."""
    try:
        return DecodedEvents(_decoder(fmt.EVENTS).decode(raw), {})
    except msgspec.ValidationError:
        items = msgspec.msgpack.decode(raw, type=list[msgspec.Raw])
    known = {cls.__struct_config__.tag for cls in (*timeline_types(), MetaUpdate)}
    one = msgspec.msgpack.Decoder(Union[(*timeline_types(), MetaUpdate)])
    events, skipped = [], {}
    for item in items:
        kind = msgspec.msgpack.decode(item, type=_Kind).kind
        if kind in known:
            events.append(one.decode(item))
        else:
            skipped[kind] = skipped.get(kind, 0) + 1
    return DecodedEvents(events, skipped)


def meta_of(meta: dict) -> Meta:
    """The typed part of a META dict (v1 dicts lack ``session_id``/``geometry``)."""
    known = {key: meta[key] for key in Meta.__struct_fields__ if key in meta}
    typed = msgspec.convert(known, Meta)
    block_checks.check_meta(meta, typed)
    return typed


# ---- format v1 (JSON dicts) ----------------------------------------------------------------------------------
def _from_v1(kind: int, obj):
    if kind == fmt.META:
        return _expect(obj, dict)
    if kind == fmt.SAMPLES:
        return _samples_from_v1(_expect(obj, list))
    if kind == fmt.EVENTS:
        return DecodedEvents(events_from_v1(_expect(obj, list)), {})
    if kind == fmt.OPS:
        items = [_expect(item, dict) for item in _expect(obj, list)]
        first = items[0].get("i", 0) if items else 0
        return OpsRecord(first, [float(item["t"]) for item in items], ops_from_v1(items))
    if kind == fmt.SNAPSHOTS:
        _expect(obj, list)
        records = [dict(_expect(item, dict), snapshot=adapted_snapshot(item.get("snapshot"))) for item in obj]
        return msgspec.convert(records, list[SnapshotRecord], strict=False)
    if kind == fmt.KEYFRAME:
        return _keyframe_from_v1(obj)
    return msgspec.convert(_expect(obj, dict), EndRecord)


def _expect(obj, kind: type):
    if not isinstance(obj, kind):
        raise ValueError(f"expected a {kind.__name__}, got {type(obj).__name__}")
    return obj


def _samples_from_v1(blocks: list) -> SampleBlock:
    """v1 SAMPLES: ``[[keys, rows], ...]`` blocks of sample dicts -> one column per field."""
    columns: dict[str, list] = {name: [] for name in SAMPLE_FIELDS}
    for keys, rows in blocks:
        index = {key: i for i, key in enumerate(_expect(keys, list))}
        missing = [name for name in SAMPLE_FIELDS if name not in index and name in checks.REQUIRED_SAMPLE_FIELDS]
        if missing:
            raise ValueError(f"sample fields {missing} missing")
        for name in SAMPLE_FIELDS:
            position = index.get(name)
            default = checks.SAMPLE_DEFAULTS[name]
            columns[name].extend(row[position] if position is not None else default for row in _expect(rows, list))
    return msgspec.convert({"columns": columns}, SampleBlock)


class _Stamp(msgspec.Struct, frozen=True):
    t: float
    step: int
    tokens: int
    op_index: int


def _keyframe_from_v1(item) -> KeyframeRecord:
    item = _expect(item, dict)
    stamp = msgspec.convert({key: item.get(key) for key in _Stamp.__struct_fields__}, _Stamp)
    book = book_state_from_v1(item["book"]) if item.get("book") is not None else None
    return KeyframeRecord.from_layers(KeyframeRecordV2(stamp.t, stamp.step, stamp.tokens, stamp.op_index,
                                                       snapshot_from_v1(item["snapshot"]), book))
