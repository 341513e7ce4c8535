"""Perfetto's native protobuf trace (TrackEvent) from ``probes.trace_export.TraceProcess`` records, built with the
``perfetto`` package's generated protos (its trace builder: plain protobuf, no network; its TraceProcessor, which
downloads a binary, is not used). mlx-free; the package is imported only when a trace is written.

Layout (docs: perfetto.dev "Writing TrackEvent Protos Synthetically"): one process track per session (a
``TrackDescriptor`` with a ``ProcessDescriptor``, pid and name), and under it one child track per counter (a
``CounterDescriptor``: bytes, count, or a named unit) and per slice/instant track, in the order
``probes.trace_export`` lists them (footprint first): the process track asks for ``EXPLICIT`` child ordering and
each child carries its ``sibling_order_rank`` (without them the UI sorts children by name). Slices are SLICE_BEGIN/SLICE_END
pairs, instants TYPE_INSTANT, arguments debug annotations. Timestamps are nanoseconds since each session's start.
Packets are serialised in chunks (concatenated ``Trace`` messages are one ``Trace``), so memory stays bounded.
"""

from __future__ import annotations

import json

from probes.trace_export import TRACKS, TraceProcess

NS = 1_000_000_000
SEQUENCE_ID = 1
CHUNK = 20_000  # packets per serialised chunk
TRACK_STRIDE = 1 << 20  # uuids: pid * stride + track number (a session holds far fewer tracks)


class _Writer:
    """Owns the open file and the chunk being built."""

    def __init__(self, f, protos) -> None:
        self.f, self.p = f, protos
        self.trace = protos.Trace()
        self.packets = 0
        self.bytes = 0
        self.first = True

    def packet(self):
        packet = self.trace.packet.add()
        packet.trusted_packet_sequence_id = SEQUENCE_ID
        if self.first:
            packet.sequence_flags = self.p.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
        self.packets += 1
        if self.packets % CHUNK == 0:
            self.flush()
        return packet

    def flush(self) -> None:
        data = self.trace.SerializeToString()
        self.f.write(data)
        self.bytes += len(data)
        self.trace = self.p.Trace()


def _protos():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    return perfetto_trace_pb2


def write_perfetto(processes: list[TraceProcess], path) -> int:
    """Write the processes as one Perfetto protobuf trace to ``path``; returns the bytes written."""
    protos = _protos()
    with open(path, "wb") as f:
        writer = _Writer(f, protos)
        for process in processes:
            _write_process(writer, protos, process)
        writer.flush()
    return writer.bytes


def _write_process(w: _Writer, p, process: TraceProcess) -> None:
    base = process.pid * TRACK_STRIDE
    desc = w.packet().track_descriptor
    desc.uuid = base
    desc.process.pid = process.pid
    desc.process.process_name = process.name
    desc.child_ordering = p.TrackDescriptor.EXPLICIT
    number = 0
    for number, counter in enumerate(process.counters, start=1):
        desc = w.packet().track_descriptor
        desc.uuid, desc.parent_uuid, desc.name = base + number, base, counter.name
        desc.sibling_order_rank = number
        if counter.unit == "bytes":
            desc.counter.unit = p.CounterDescriptor.UNIT_SIZE_BYTES
        elif counter.unit == "count":
            desc.counter.unit = p.CounterDescriptor.UNIT_COUNT
        else:
            desc.counter.unit_name = counter.unit
        _counter_values(w, p, base + number, counter)
    for offset, track in enumerate(TRACKS, start=number + 1):
        desc = w.packet().track_descriptor
        desc.uuid, desc.parent_uuid, desc.name = base + offset, base, track
        desc.sibling_order_rank = offset
        for mark in process.tracks[track]:
            _mark(w, p, base + offset, mark)


def _counter_values(w: _Writer, p, uuid: int, counter) -> None:
    counter_type = p.TrackEvent.TYPE_COUNTER
    integral = all(isinstance(v, int) for v in counter.values)
    for t, value in zip(counter.t, counter.values):
        packet = w.packet()
        packet.timestamp = round(t * NS)
        event = packet.track_event
        event.type, event.track_uuid = counter_type, uuid
        if integral:
            event.counter_value = value
        else:
            event.double_counter_value = float(value)


def _mark(w: _Writer, p, uuid: int, mark) -> None:
    packet = w.packet()
    packet.timestamp = round(mark.t * NS)
    event = packet.track_event
    event.track_uuid, event.name = uuid, mark.name
    event.type = p.TrackEvent.TYPE_INSTANT if mark.dur is None else p.TrackEvent.TYPE_SLICE_BEGIN
    for key, value in mark.args.items():
        _annotate(event.debug_annotations.add(), key, value)
    if mark.dur is not None:
        end = w.packet()
        end.timestamp = round((mark.t + mark.dur) * NS)
        end.track_event.type, end.track_event.track_uuid = p.TrackEvent.TYPE_SLICE_END, uuid


def _annotate(annotation, key: str, value) -> None:
    annotation.name = key
    if isinstance(value, bool):
        annotation.bool_value = value
    elif isinstance(value, int) and -2**63 <= value < 2**63:
        annotation.int_value = value
    elif isinstance(value, float):
        annotation.double_value = value
    elif isinstance(value, str):
        annotation.string_value = value
    else:
        annotation.string_value = json.dumps(value, default=str)
