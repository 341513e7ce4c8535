"""A session as a trace for standard viewers: counter tracks, slices and instants, format-neutral (mlx-free).

``trace_process(model, pid, name)`` reads a ``SessionModel`` (a recording or a live run) into one
``TraceProcess``: what ui.perfetto.dev and chrome://tracing draw as one process, so several sessions (slab, dense,
monolithic; the ranks of a distributed run) sit side by side, each from its own start. The writers
(``probes.trace_chrome``: Chrome's JSON trace format; ``probes.trace_perfetto``: Perfetto's protobuf) only lay
these records out.

What a process holds:

* Counters, in this order (the protobuf writer keeps it): from every memory sample, the footprint
  (``active + cache``), MLX active and cache, RSS, the pool's live and reserved bytes and the slabs it holds over all
  layers (``probes.figures.slab_series``); from every pool snapshot, per layer its slabs, occupancy (rows in use /
  capacity) and fragmentation index (layers with equal series share a track, "slabs L0-29"); from every decode step,
  the gather runs of its sequences (max and mean, the steps behind ``probes.figures.gather_runs``) and the layers that
  ran fused; from every step, its own tokens per second.
  A counter keeps a value until the next one, so only changes are kept (a flat line costs nothing).
* Slices: the scenario's phases, and every prefill/decode step (``Step.t`` is its end, ``wall_s`` its length; a
  start is clamped to the previous step's end so slices nest on their track).
* Instants: pool ops that change what memory holds (``OP_INSTANTS``: growth, copies, releases), fused/gather
  decisions per layer with their reasons, errors, and every other timeline event kind by its tag (a new event kind
  shows up with no change here; a new op kind with one line in ``OP_INSTANTS``); on the "figures" track one instant
  at the end whose arguments are the whole-run figures (``whole_run_figures``), as ``compare`` prints them.

Times are seconds since the session start (the writers convert); values are plain numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from pool.ops import (BlockMove, Clone, Copied, CopyOnWrite, Detach, Grow, Release, ReleaseHandle, Reserve,
                      SlabAppend, SlabRelease, StorageInit, Trim)
from probes import figures
from probes.events import (FusedChange, GatherRuns, PhaseEdge, ProbeStats, Step, TimelineEvent, WorkerError)

# Sample column -> (counter name, unit). ``pool reserved`` is live + free (the pool's reserved capacity).
SAMPLE_COUNTERS = (("footprint", "footprint (active+cache)", "bytes"), ("active", "MLX active", "bytes"),
                   ("cache", "MLX cache", "bytes"), ("rss", "RSS", "bytes"), ("pool_live", "pool live", "bytes"),
                   ("pool_reserved", "pool reserved", "bytes"), ("pool_slabs", figures.LABELS["slabs"], "count"))
LAYER_COUNTERS = (("slabs", "count"), ("occupancy", "ratio"), ("fragmentation", "ratio"))
# per decode step: the most and the mean runs of its sequences (the steps behind figures.gather_runs); per step:
# its own tokens over its own time
STEP_COUNTERS = (("gather runs max (step)", "count"), ("gather runs mean (step)", "count"),
                 ("fused layers", "count"), ("step tok/s", "tok/s"))

# Pool op type -> instant name (track "pool"); the op's fields become the instant's arguments. One line per kind.
OP_INSTANTS: dict[type, str] = {
    SlabAppend: "slab append",
    Grow: "grow by copy",
    Copied: "copied (measured)",
    CopyOnWrite: "copy-on-write",
    Release: "release sequence",
    ReleaseHandle: "release prefix handle",
    Detach: "detach",
    Clone: "clone",
    Trim: "trim",
    StorageInit: "storage init",
    SlabRelease: "slab release",
    BlockMove: "blocks moved",
    Reserve: "reserve ahead",  # an admission round's capacity held in one growth (its slab appends follow it)
}

# Timeline events drawn elsewhere (slices, counters) or too frequent to be useful as instants.
_NOT_INSTANTS = (Step, PhaseEdge, GatherRuns, ProbeStats)

TRACKS = ("phases", "steps", "pool", "decisions", "errors", "events", "figures")  # slice/instant tracks, in order


@dataclass
class Counter:
    """One counter track: ``values[i]`` from ``t[i]`` on (changes only)."""

    name: str
    unit: str
    t: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def add(self, t: float, value) -> None:
        if value is None or (self.values and self.values[-1] == value):
            return
        self.t.append(t)
        self.values.append(value)


@dataclass
class Mark:
    """A slice (``dur`` seconds) or an instant (``dur`` None) on a track."""

    name: str
    t: float
    dur: float | None = None
    args: dict = field(default_factory=dict)


@dataclass
class TraceProcess:
    pid: int
    name: str
    counters: list[Counter]
    tracks: dict[str, list[Mark]]  # track name -> marks in time order (TRACKS order)
    duration: float
    meta: dict

    def counter(self, name: str) -> Counter | None:
        return next((c for c in self.counters if c.name == name), None)


def session_name(model, path: str | None = None, shown: str | None = None) -> str:
    """What a process is called: backend, scenario, model and (for files) the file, as ``shown`` or by its name."""
    meta = model.meta
    scenario = meta.get("scenario", {})
    scenario = scenario.get("name") if isinstance(scenario, dict) else scenario
    model_name = meta.get("model", {})
    model_name = model_name.get("name") if isinstance(model_name, dict) else model_name
    parts = [str(x) for x in (meta.get("backend"), scenario, model_name) if x]
    ranks = meta.get("distributed")
    if isinstance(ranks, dict) and ranks.get("rank") is not None:
        parts.append(f"rank {ranks['rank']}")
    label = " · ".join(parts) or (model.label or "session")
    shown = shown or (Path(path).name if path else None)
    return f"{label} ({shown})" if shown else label


def _shown_files(paths: list) -> list[str | None]:
    """How each file is named in its process: by its name, with its folder when two files share a name (two runs'
    ``distinct_burst-dense.slabrec``)."""
    names = [Path(path).name if path else None for path in paths]
    return [f"{Path(path).parent.name}/{name}" if name and names.count(name) > 1 else name
            for path, name in zip(paths, names)]


def _numbered(names: list[str]) -> list[str]:
    """``names`` with any still repeated (the same file given twice) numbered, so each is its own process."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(f"{name} #{seen[name]}" if names.count(name) > 1 else name)
    return out


def trace_process(model, pid: int, name: str) -> TraceProcess:
    """The whole session as one process (see the module docstring). Reads ``model``; changes nothing."""
    tracks: dict[str, list[Mark]] = {name_: [] for name_ in TRACKS}
    counters = _sample_counters(model)
    counters += _layer_counters(model)
    counters += _step_counters(model, tracks["steps"])
    tracks["phases"] = [Mark(span.name, span.start, (model.duration if span.end is None else span.end) - span.start)
                        for span in model.phases()]
    tracks["pool"] = _op_instants(model)
    _event_instants(model, tracks)
    tracks["figures"] = [Mark("whole-run figures", model.duration, None, whole_run_figures(model))]
    return TraceProcess(pid, name, [c for c in counters if c.t], tracks, model.duration, model.meta)


def whole_run_figures(model) -> dict:
    """The session's whole-run figures (``probes.figures``), keyed by their labels and printed as every other surface
    prints them: what a trace viewer shows on the "figures" track's one instant, at the session's end."""
    L = figures.LABELS
    declined = figures.declines(model)
    return {L["footprint"]: figures.format_bytes_cell(figures.peak_footprint(model)),
            L["tok_s:busy"]: figures.format_tok_s(figures.tok_s(model, "busy")),
            L["tok_s:prefill"]: figures.format_tok_s(figures.tok_s(model, "prefill")),
            L["tok_s:decode"]: figures.format_tok_s(figures.tok_s(model, "decode")),
            L["gather_runs"]: figures.format_runs(figures.gather_runs(model)),
            L["declines"]: figures.format_declines(declined),
            L["slabs"]: figures.format_slabs(figures.slab_count(model)),
            L["probe_cost"]: figures.format_probe_cost(figures.probe_cost(model))}


def _sample_counters(model) -> list[Counter]:
    """Memory counters of every sample (the pool's only where the session has a pool: dense samples 0 there).
    Recordings made before samples carried the pool's bytes (all 0 there) take them from the pool snapshots."""
    window = model.samples.window()
    counters = []
    sampled_pool = any(window.pool_live) or any(window.pool_free)
    for column, name, unit in SAMPLE_COUNTERS:
        if column.startswith("pool_") and not model.is_pool:
            continue
        counter = Counter(name, unit)
        if column == "pool_slabs":
            for t, value in zip(*figures.slab_series(model)):
                counter.add(t, value)
            counters.append(counter)
            continue
        if column in ("pool_live", "pool_reserved") and not sampled_pool:
            stat = "bytes_in_use" if column == "pool_live" else "bytes_reserved"
            for record in model.snapshots:
                counter.add(record.t, getattr(record.snapshot.stats, stat))
        elif column == "pool_reserved":
            values = [live + free for live, free in zip(window.pool_live, window.pool_free)]
        else:
            values = getattr(window, column)
        for t, value in zip(window.t, values):
            counter.add(t, value)
        counters.append(counter)
    return counters


def _layer_counters(model) -> list[Counter]:
    """Per layer slabs, occupancy and fragmentation from every snapshot summary. Layers whose whole series are
    equal share one track named by their layers ("slabs L0-29"): the pool's layers move in lockstep, so a 30-layer
    pool usually needs one track per figure, not thirty identical ones."""
    series: list[list[tuple]] = []  # per layer: (t, slabs, occupancy, fragmentation) at each snapshot
    for record in model.snapshots:
        layers = record.snapshot.layers
        while len(series) < len(layers):
            series.append([])
        for layer, points in zip(layers, series):
            used = layer.capacity_rows - layer.free_rows
            occupancy = round(used / layer.capacity_rows, 6) if layer.capacity_rows else 0.0
            points.append((record.t, layer.num_chunks, occupancy, round(layer.fragmentation, 6)))
    groups: dict[tuple, list[int]] = {}
    for index, points in enumerate(series):
        groups.setdefault(tuple(points), []).append(index)
    counters = []
    for points, layers in groups.items():
        suffix = layer_label(layers)
        for column, (what, unit) in enumerate(LAYER_COUNTERS, start=1):
            counter = Counter(f"{what} {suffix}", unit)
            for point in points:
                counter.add(point[0], point[column])
            counters.append(counter)
    return counters


def layer_label(layers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"L0-2,5"``; ``[3]`` -> ``"L3"``."""
    parts, start = [], None
    for i, layer in enumerate(layers):
        if start is None:
            start = layer
        if i + 1 == len(layers) or layers[i + 1] != layer + 1:
            parts.append(str(start) if start == layer else f"{start}-{layer}")
            start = None
    return "L" + ",".join(parts)


def _step_counters(model, steps: list[Mark]) -> list[Counter]:
    """Step slices (into ``steps``) and the per-step counters (gather runs, fused layers, tokens per second)."""
    runs_max, runs_mean, fused, tok_s = (Counter(name, unit) for name, unit in STEP_COUNTERS)
    end = 0.0
    for step in model.events_of(Step):
        start = max(step.t - step.wall_s, end)
        end = max(step.t, start)
        steps.append(Mark(step.type, start, end - start,
                          {"step": step.step, "phase": step.phase, "batch": step.batch, "tokens": step.num_tokens}))
        if step.wall_s > 0:
            tok_s.add(step.t, round(step.num_tokens / step.wall_s, 1))
    for t, _step, worst in figures.worst_runs_per_step(model):
        runs_max.add(t, worst)
    for event in model.events_of(GatherRuns):
        if event.runs_max:
            runs_mean.add(event.t, round(sum(event.runs_max) / len(event.runs_max), 3))
        fused.add(event.t, event.fused_layers)
    return [runs_max, runs_mean, fused, tok_s]


def _op_instants(model) -> list[Mark]:
    marks = []
    for entry in model.all_ops():
        name = OP_INSTANTS.get(type(entry.op))
        if name is not None:
            marks.append(Mark(name, entry.t, None, msgspec.to_builtins(entry.op)))
    return marks


def _event_instants(model, tracks: dict[str, list[Mark]]) -> None:
    """Decisions, errors and every other timeline event kind (by its tag) as instants."""
    for event in model.events:
        if isinstance(event, _NOT_INSTANTS):
            continue
        match event:
            case FusedChange(layer=layer, use_fused=use, reason=reason):
                tracks["decisions"].append(Mark(f"{'fused' if use else 'gather'} L{layer}", event.t, None,
                                                {"layer": layer, "reason": reason}))
            case WorkerError(text=text, origin=origin):
                tracks["errors"].append(Mark("error", event.t, None, {"text": text, "origin": origin}))
            case TimelineEvent():
                tracks["events"].append(Mark(event.kind, event.t, None, _event_args(event)))


def _event_args(event) -> dict:
    args = msgspec.to_builtins(event)
    for key in ("t", "kind"):
        args.pop(key, None)
    return args


def trace_processes(models_and_paths) -> list[TraceProcess]:
    """One process per (model, path) pair, pids 1, 2, ... in the order given."""
    pairs = list(models_and_paths)
    shown = _shown_files([path for _, path in pairs])
    names = _numbered([session_name(model, path, label) for (model, path), label in zip(pairs, shown)])
    return [trace_process(model, pid, name) for pid, ((model, _), name) in enumerate(zip(pairs, names), start=1)]
