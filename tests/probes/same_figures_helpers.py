"""What every surface prints for each figure, read back from its output (for tests/probes/test_same_figures.py).

Each reader runs one surface the way a user does (the CLI in-process, the report's Markdown, the trace files, the
metrics exposition parsed by ``prometheus_client``'s parser, the TUI's view functions) and returns
``{session: {figure: printed text}}``. The figures are named as ``REFERENCE`` names them; a surface that does not
print a figure leaves it out.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import mlx.core as mx

from pool import PagedKVPool, PoolConfig
from pool.units import mib
from probes import figures
from probes.events import FusedChange, GatherRuns, PhaseEdge, Step
from probes.live import WorkerProbes
from probes.synthetic import ScriptedTraffic

FIGURES = ("footprint", "ratio", "busy", "decode", "runs", "declines", "slabs", "probe")


def reference(view, base) -> dict[str, str]:
    """Every figure of ``view`` over its whole run as ``probes.figures`` defines and prints it (``base``: the
    baseline session, None when ``view`` is the baseline)."""
    peak = figures.peak_footprint(view)
    return {"footprint": mib(peak), "ratio": "base" if base is None else
            figures.format_ratio(figures.footprint_ratio(peak, figures.peak_footprint(base))),
            "busy": figures.format_tok_s(figures.tok_s(view, "busy")),
            "decode": figures.format_tok_s(figures.tok_s(view, "decode")),
            "runs": figures.format_runs(figures.gather_runs(view)),
            "declines": figures.format_declines(figures.declines(view)),
            "slabs": figures.format_slabs(figures.slab_count(view)),
            "probe": figures.format_probe_cost(figures.probe_cost(view))}


# ---- a recording with every figure, declines included ----------------------------------------------------------
def record_with_declines(path: Path, steps: int = 24) -> None:
    """A real slab pool under scripted traffic, recorded by ``WorkerProbes`` like a workload's: two phases, prefill
    and decode steps with measured wall times, per-step gather runs (``gather_visible``'s own counts) and per-layer
    fused decisions that decline for a while (compiling, then a batch below break-even) and change only on change,
    as the backend emits them."""
    layers = 2
    mx.clear_cache()  # an empty MLX buffer cache, as every scripted pool recording starts from (probes_scripted.py)
    pool = PagedKVPool(PoolConfig(num_layers=layers, block_size=4, slab_blocks=4, design="slab"))
    probes = WorkerProbes(None, sample_hz=200.0, snapshot_hz=1e6, record_path=path, keyframe_interval_s=1e9,
                          meta={"scenario": "scripted", "backend": "slab", "model": "none", "label": "slab"})
    prefilled = [0]

    def write(seq, start, n):
        kv = (mx.broadcast_to(mx.arange(start, start + n, dtype=mx.float32)[:, None, None], (n, 1, 4)) + seq)[None]
        slots = pool.write_slots([seq], [start], n)
        for layer in range(layers):
            pool.write(layer, slots, kv, kv + 0.5)
        if n > 1:
            prefilled[0] += n

    probes.attach_pool(pool)
    probes.start()
    traffic = ScriptedTraffic(pool, seed=11, write=write, max_live=4, prefill=(3, 17))
    state: dict[int, tuple[bool, str]] = {}
    tokens = 0
    for step in range(1, steps + 1):
        if step in (1, steps // 2 + 1):
            if step > 1:
                probes.emit(PhaseEdge(name="warm", edge="end"))
            probes.emit(PhaseEdge(name="warm" if step == 1 else "churn", edge="start"))
        before, started = prefilled[0], time.perf_counter()
        traffic.step()
        runs = [max(pool.gather_visible(layer, seq).num_runs for layer in range(layers)) for seq in traffic.live]
        wall = time.perf_counter() - started
        if prefilled[0] > before:
            probes.emit(Step(phase="p", type="prefill", batch=1, num_tokens=prefilled[0] - before, wall_s=wall / 2))
        probes.emit(Step(phase="p", type="decode", batch=len(traffic.live), num_tokens=len(traffic.live),
                         wall_s=wall / 2))
        tokens += prefilled[0] - before + len(traffic.live)
        for layer in range(layers):
            decision = (False, "kernel for 3 slabs compiling") if layer == 1 and step < 8 else \
                (False, "batch 1 below measured break-even 2") if len(traffic.live) < 2 else \
                (True, f"fused cuda kernel ({step} slabs)")
            if state.get(layer) != decision:
                state[layer] = decision
                probes.emit(FusedChange(layer=layer, use_fused=decision[0], reason=decision[1]))
        if traffic.live:
            probes.emit(GatherRuns(seq_ids=list(traffic.live), runs_layer0=runs, runs_max=runs,
                                   fused_layers=sum(use for use, _ in state.values())))
        probes.tick(step, tokens)
    probes.emit(PhaseEdge(name="churn", edge="end"))
    probes.stop({"steps": steps})


# ---- reading the surfaces back -----------------------------------------------------------------------------------
def split_row(line: str) -> list[str]:
    """A terminal table row's cells (columns are two or more spaces apart; no cell holds two spaces)."""
    return re.split(r" {2,}", line.strip())


def compare_table(out: str) -> dict[tuple[str, str], dict[str, str]]:
    """{(session, phase): {column header: cell}} of ``compare``'s table."""
    lines = [line for line in out.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith("session "))
    header = split_row(lines[start])
    rows = {}
    for line in lines[start + 2:]:
        if line.startswith(("GATE", "note:")):
            break
        cells = split_row(line)
        rows[(cells[0], cells[1])] = dict(zip(header, cells))
    return rows


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of ``text`` as rows of cells (the rule row dropped)."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= {"-", ":"} for cell in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


L = figures.LABELS
TABLE_COLUMNS = {"footprint": f"{L['footprint']} MiB", "ratio": L["footprint_ratio"], "busy": L["tok_s:busy"],
                 "decode": L["tok_s:decode"], "runs": L["gather_runs"], "declines": L["declines"],
                 "slabs": L["slabs"]}
EXPORT_KEYS = {"footprint": L["footprint"], "busy": L["tok_s:busy"], "decode": L["tok_s:decode"],
               "runs": L["gather_runs"], "declines": L["declines"], "slabs": L["slabs"], "probe": L["probe_cost"]}


def from_table(rows: dict, phase: str = "all") -> dict[str, dict[str, str]]:
    """{session: {figure: cell}} of a compare-style table, for one phase."""
    return {session: {figure: cells[column] for figure, column in TABLE_COLUMNS.items()}
            for (session, row_phase), cells in rows.items() if row_phase == phase}


def from_json(data: dict, phase: str = "all") -> dict[str, dict[str, str]]:
    out = {}
    for r in data["rows"]:
        if r["phase"] != phase:
            continue
        runs = figures.RunsFigure({r["max_runs"]: 1}, "") if r["max_runs"] is not None else None
        out[r["session"]] = {
            "footprint": mib(r["footprint_max"]),
            "ratio": "base" if r["is_baseline"] else figures.format_ratio(r["footprint_ratio"]),
            "busy": figures.format_tok_s(r["tokens_per_s"]), "decode": figures.format_tok_s(r["decode_tokens_per_s"]),
            "runs": "-" if runs is None else f"{r['mean_runs']:.2f}/{r['max_runs']}",
            "declines": "-" if r["declines"] is None else f"{r['declines']}/{r['decisions']}",
            "slabs": figures.format_slabs(r["max_slabs"])}
    return out


def from_report(markdown: str) -> dict[str, dict[str, str]]:
    """The report's compare table ("all" rows) and its sessions table's probe cost row."""
    tables = markdown_tables(markdown)
    compare = tables[0]
    header = compare[0]
    rows = {(cells[0], cells[1]): dict(zip(header, cells)) for cells in compare[1:]}
    out = from_table(rows)
    meta = tables[1]
    cost = next(cells for cells in meta if cells[0].startswith(L["probe_cost"]))
    for label, value in zip(meta[0][1:], cost[1:]):
        out.setdefault(label, {})["probe"] = value
    return out


def from_whatif(out: str) -> dict[str, str]:
    """The recorded column of ``whatif``'s table (gather runs, slabs) and its measured peak footprint."""
    got = {}
    for line in out.splitlines():
        cells = split_row(line)
        if cells[0].startswith(L["gather_runs"]):
            got["runs"] = cells[1]
        elif cells[0] == f"{L['slabs']}, max":
            got["slabs"] = cells[1]
        elif line.strip().startswith("peak footprint, recorded (measured):"):
            got["footprint"] = line.split(":", 1)[1].strip().removesuffix(" MiB")
    return got


def from_export_args(args_by_process: dict[str, dict]) -> dict[str, dict[str, str]]:
    """{process name: {figure: value}} from the "whole-run figures" instants' arguments."""
    return {name: {figure: str(args[key]).removesuffix(" MiB") for figure, key in EXPORT_KEYS.items()}
            for name, args in args_by_process.items()}


def chrome_figures(path: Path) -> dict[str, dict]:
    trace = json.loads(path.read_text(encoding="utf-8"))
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    return {names[e["pid"]]: e["args"] for e in trace["traceEvents"] if e["name"] == "whole-run figures"}


def perfetto_figures(path: Path) -> dict[str, dict]:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as protos

    trace = protos.Trace.FromString(path.read_bytes())
    parents, names, out = {}, {}, {}
    for packet in trace.packet:
        if packet.HasField("track_descriptor"):
            desc = packet.track_descriptor
            if desc.HasField("process"):
                names[desc.uuid] = desc.process.process_name
            else:
                parents[desc.uuid] = desc.parent_uuid
        elif packet.HasField("track_event") and packet.track_event.name == "whole-run figures":
            args = {a.name: a.string_value for a in packet.track_event.debug_annotations}
            out[names[parents[packet.track_event.track_uuid]]] = args
    return out


def from_metrics(text: str) -> dict[str, dict[str, str]]:
    """{backend: {figure: value}} from a Prometheus exposition, parsed by ``prometheus_client``'s parser, through
    the PromQL a user would write over a whole run (rates over the run are the counters' totals)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values.setdefault(sample.labels.get("backend"), {}).setdefault(sample.name, []).append(sample)
    out = {}
    for backend, metrics in values.items():
        if backend is None:
            continue
        total = lambda name, **match: sum(s.value for s in metrics.get(name, [])  # noqa: E731
                                          if all(s.labels.get(k) == v for k, v in match.items()))
        seconds, decode_s = total("slabscope_step_seconds_total"), total("slabscope_step_seconds_total", type="decode")
        got = {"footprint": mib(total("slabscope_footprint_peak_bytes")),
               "busy": figures.format_tok_s(total("slabscope_tokens_total") / seconds if seconds else None),
               "decode": figures.format_tok_s(total("slabscope_tokens_total", type="decode") / decode_s
                                              if decode_s else None)}
        count = total("slabscope_gather_runs_count")
        if count:
            top = max(float(s.labels["le"]) for s in metrics["slabscope_gather_runs_bucket"]
                      if s.labels["le"] != "+Inf" and s.value == count
                      and not any(o.value == count and float(o.labels["le"]) < float(s.labels["le"])
                                  for o in metrics["slabscope_gather_runs_bucket"] if o.labels["le"] != "+Inf"))
            got["runs"] = f"{total('slabscope_gather_runs_sum') / count:.2f}/{top:g}"
        decisions = total("slabscope_attention_decisions_total")
        if decisions:
            got["declines"] = f"{total('slabscope_attention_decisions_total', outcome='gather'):g}/{decisions:g}"
        if "slabscope_probe_cost_ratio" in metrics:
            got["probe"] = figures.format_probe_cost(total("slabscope_probe_cost_ratio"))
        out[backend] = got
    return out
