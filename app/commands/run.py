"""``slabscope run``: one scenario on one backend, with progress lines and a summary (tokens, tok/s, footprint).

Parser construction imports nothing heavy; mlx is imported only when a run starts. Runs in this process by
default; ``--worker`` runs it in a spawned worker process exactly as the TUI does.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time

from app.commands.arg_types import non_negative_int, positive_int
from app.commands.errors import output_file
from app.models.registry import DTYPE_NAMES
from app.workloads.limits import check_fits_context
from app.workloads.scenarios import DEFAULT_SCENARIO, ScenarioError, list_scenarios, load_scenario, parse_overrides
from app.commands.arg_types import add_mlx_cache_arguments, add_open_blocks_argument, add_shrink_arguments
from app.commands.metrics_args import add_metrics_arguments, hold_metrics, start_metrics
from app.commands.outputs import add_force_argument
from app.workloads.spec import BACKENDS, RunSpec
from pool.errors import PoolError

MIB = 1024 * 1024


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run a workload scenario on one backend and print a summary")
    p.add_argument("--scenario", default=DEFAULT_SCENARIO, help=f"scenario name (default {DEFAULT_SCENARIO}; "
                   "--list shows all) or a path to a scenario .toml")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--backend", choices=BACKENDS, default="slab", help="KV storage (default slab)")
    p.add_argument("--model", default="smollm2-135m", help="model name or mlx-lm directory (default smollm2-135m)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout (progress on stderr)")
    p.add_argument("--block-size", type=positive_int, default=None,
                   help="tokens per block (default: scenario's, else 32)")
    p.add_argument("--slab-blocks", type=positive_int, default=None,
                   help="blocks per slab (default: scenario's, else 32)")
    p.add_argument("--prefill-chunk", type=positive_int, default=None, help="prefill chunk in tokens (default 256)")
    p.add_argument("--prefill-batch-tokens", type=non_negative_int, default=None,
                   help="tokens a prefill step may batch over sequences at the same chunk (default 8192; 0: one "
                        "sequence per step)")
    p.add_argument("--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="override scenario parameters (e.g. --set n=8 prompt_tokens=4096)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default=None, choices=DTYPE_NAMES,
                   help="float32 (CPU default) | bfloat16 (GPU default) | float16")
    p.add_argument("--device", choices=("cpu", "gpu"), default=None)
    p.add_argument("--budget", type=positive_int, default=None, metavar="BLOCKS",
                   help="pool budget: max blocks per layer")
    p.add_argument("--prefix-cache", dest="prefix_cache", action="store_true", default=None,
                   help="share full prompt blocks across requests (default: the scenario's choice)")
    p.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false")
    add_mlx_cache_arguments(p, who="this run")
    add_shrink_arguments(p, who="this run (slab and monolithic backends)")
    add_open_blocks_argument(p)
    p.add_argument("--record", default=None, metavar="PATH",
                   help="record the session to PATH (probes format; a new file unless --force)")
    add_force_argument(p, "an existing (finished) recording at --record PATH")
    p.add_argument("--worker", action="store_true", help="run in a spawned worker process (as the TUI does)")
    p.add_argument("--no-measure-gathers", dest="measure_gathers", action="store_false", default=True,
                   help="do not meter the bytes reads copy out of the pool with MLX's allocator (metering waits "
                        "for the device at every read; the summary then shows the shape-derived figure only)")
    add_metrics_arguments(p)
    p.set_defaults(func=main)


def _error(text: str) -> int:
    print(f"slabscope run: {text}", file=sys.stderr)
    return 2


def build_spec(args) -> RunSpec:
    """A validated RunSpec from the arguments (scenario, model name, the scenario against the model's positions and
    the --record path checked; nothing loaded)."""
    from app.models.registry import max_positions

    overrides = parse_overrides(args.set)
    scenario = load_scenario(args.scenario, overrides)
    check_fits_context(scenario, max_positions(args.model), args.model)
    if args.record is not None:
        output_file(args.record, "--record")
    return RunSpec(scenario=args.scenario, backend=args.backend, model=args.model, block_size=args.block_size,
                   slab_blocks=args.slab_blocks, prefill_chunk=args.prefill_chunk,
                   prefill_batch_tokens=args.prefill_batch_tokens, seed=args.seed,
                   dtype=args.dtype, device=args.device, overrides=overrides,
                   prefix_cache=args.prefix_cache, max_blocks_per_layer=args.budget,
                   record_path=args.record, cache_limit=args.cache_limit, prefill_trim=args.prefill_trim,
                   prefill_inflight=args.prefill_inflight,
                   shrink=args.shrink, shrink_budget=args.shrink_budget, open_blocks=args.open_blocks,
                   measure_gathers=args.measure_gathers)


def main(args) -> int:
    if args.list:
        for name, description in list_scenarios():
            print(f"{name:<20} {description}")
        return 0
    try:
        spec = build_spec(args)
    except (ScenarioError, ValueError) as exc:
        return _error(str(exc))
    claims = []
    if spec.record_path is not None:  # before any work: an existing file or a second writer is one line
        from app.commands.outputs import claim_recordings, scenario_inputs

        claims = claim_recordings([spec.record_path], args.force, scenario_inputs(args.scenario))
        spec = dataclasses.replace(spec, record_claim=claims[0].token)
    metrics = None
    try:
        metrics = start_metrics(args)  # before any work: a port in use is one line and nothing runs
        progress = Progress(sys.stderr if args.json else sys.stdout,
                            observe=None if metrics is None else lambda event: metrics.observe(event, spec.backend))
        return _run_and_print(args, spec, progress)
    finally:
        from app.commands.outputs import release_all

        release_all(claims)
        hold_metrics(args, metrics)


def _run_and_print(args, spec: RunSpec, progress: "Progress") -> int:
    """Run, print the summary (text or ``--json``); exit status 1 when the run failed or its recording stopped
    with an error (one line saying so, after the summary)."""
    from app.commands.outputs import recording_problem
    from probes.outfile import OutputError

    if args.worker:
        summary = _run_in_worker(spec, progress)
    else:
        try:
            summary = _run_here(spec, progress)
        except (RuntimeError, ValueError, OSError, PoolError, OutputError) as exc:  # budget, device room: one line
            known = isinstance(exc, (ValueError, PoolError, OutputError))  # their messages say it all
            print(f"slabscope run: {'' if known else type(exc).__name__ + ': '}{exc}", file=sys.stderr)
            return 1
    if summary is None or "error" in summary:
        return 1
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary, progress.meta, sys.stdout)
    problem = recording_problem(summary)
    if problem is not None:
        print(f"slabscope run: {problem}; the file holds the run up to that point", file=sys.stderr)
        return 1
    return 0


def _run_here(spec: RunSpec, progress: "Progress") -> dict:
    """In this process, with the probes (memory samples, snapshots, --record) delivering events to ``progress``."""
    from app.models.blas import enable_openblas
    from probes.events import RunStage

    progress.on_event(RunStage(t=time.monotonic(), stage="loading model", detail="importing MLX"))  # seconds
    enable_openblas()
    from app.workloads.runner import run_workload
    from app.workloads.worker_sink import make_sink

    sink = make_sink(progress.on_event, spec)
    try:
        summary = run_workload(spec, sink.emit, sink.tick, attach=sink.attach)
    except BaseException:
        sink.finish({"error": "run failed"})
        raise
    return sink.finish(summary)


def _run_in_worker(spec: RunSpec, progress: "Progress") -> dict | None:
    from app.workloads.worker import WorkerHandle

    handle = WorkerHandle(spec).start()
    try:
        while True:
            for event in handle.poll():
                progress.on_event(event)
            if handle.finished:
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        handle.cancel()
        raise
    if handle.error:
        print(f"slabscope run: worker failed: {handle.error} (log: {handle.log_path})", file=sys.stderr)
    return handle.summary


class Progress:
    """Prints where the run is as it goes (``probes.progress``: loading model, rehearsal, each phase edge, then
    every ~2 s the step, requests k/N, tokens and the estimated time left); keeps the meta event for the summary;
    hands every event to ``observe`` too (the metrics endpoint), when given."""

    def __init__(self, out, observe=None):
        from probes.progress import RunProgress

        self.out = out
        self.meta: dict = {}
        self._last = 0.0
        self._observe = observe
        self.run = RunProgress()

    def on_event(self, event) -> None:
        from probes.events import LogLine, MetaUpdate, PhaseEdge, RunStage, Step, WorkerError

        if self._observe is not None:
            self._observe(event)
        self.run.fold(event)
        match event:
            case RunStage():
                print(self.run.text(), file=self.out, flush=True)
            case MetaUpdate(meta=meta):
                self.meta = meta
                model = meta.get("model", {})
                print(f"{meta.get('backend')} | {model.get('name')} ({model.get('dtype')}, {meta.get('device')}) | "
                      f"{meta.get('blas')}", file=self.out, flush=True)
            case PhaseEdge():
                print(f"phase {event.name}: {event.edge} (step {event.step}, {event.tokens} tokens)", file=self.out,
                      flush=True)
            case Step() if time.monotonic() - self._last > 2.0:
                self._last = time.monotonic()
                print(f"  step {event.step:>5} {event.type:<7} batch {event.batch:>2} {event.num_tokens:>4} tok in "
                      f"{event.wall_s * 1e3:7.1f} ms | {self.run.text(event.t)}", file=self.out, flush=True)
            case LogLine(text=text):
                print(f"log: {text}", file=self.out, flush=True)
            case WorkerError(text=text, traceback=tb):
                print(f"error: {text}", file=self.out, flush=True)
                if tb:
                    print(tb, file=self.out, flush=True)


def print_summary(summary: dict, meta: dict, out) -> None:
    """The human-readable summary: per-phase tok/s, totals, footprint, pool and prefix-cache counters."""
    w = lambda text="": print(text, file=out)  # noqa: E731
    w(f"\n== {summary['scenario']} on {summary['backend']} ({summary['model']}) "
      f"{'CANCELLED ' if summary.get('cancelled') else ''}==")
    for name, p in summary["phases"].items():
        w(f"phase {name:<14} prefill {p['prefill_tokens']:>6} tok {p['prefill_tok_s']:>8.1f} tok/s | "
          f"decode {p['decode_tokens']:>5} tok {p['decode_tok_s']:>7.1f} tok/s | {p['tok_s']:.1f} tok/s over "
          f"{p['wall_s']:.2f} s wall | "
          f"{p['requests_finished']} requests")
    w(f"total: {summary['prefill_tokens'] + summary['decode_tokens']} tokens ({summary['prefill_tokens']} prefill + "
      f"{summary['decode_tokens']} decode) in {summary['wall_s']:.2f} s, {summary['tok_s']:.1f} tok/s busy, "
      f"{summary['steps']} steps, {summary['requests_finished']} requests")
    for line in footprint_lines(summary["footprint"]):
        w(line)
    pool = summary.get("pool")
    if pool:
        c, s = pool["counters"], pool["stats"]
        w(f"pool: slabs in layer 0 {pool['num_slabs'][0] if pool['num_slabs'] else 0}, rows minted "
          f"{c['rows_minted']}, reused {c['rows_reused']}, slab appends {c['slab_appends']}, grow events "
          f"{c['grow_events']}, bytes copied {c['bytes_copied'] / MIB:.1f} MiB measured "
          f"({(c.get('bytes_copied_model') or 0) / MIB:.1f} MiB model), reserved "
          f"{s['bytes_reserved'] / MIB:.1f} MiB, copy-on-write block copies {c['cow_copies']}; at end: "
          f"{s['live_blocks']} live blocks, {s['num_sequences']} sequences, {s['num_handles']} prefix handles")
    shrink = summary.get("shrink")
    if shrink and shrink["policy"] != "off":
        w(f"shrink ({shrink['policy']}): {shrink['slabs_released']} slabs released "
          f"({shrink['bytes_released'] / MIB:.1f} MiB), {shrink['blocks_moved']} blocks moved "
          f"({shrink['bytes_moved'] / MIB:.2f} MiB measured, {shrink['bytes_moved_model'] / MIB:.2f} MiB model, "
          f"{shrink['move_s'] * 1e3:.1f} ms), MLX cache trimmed "
          f"{shrink['trimmed_bytes'] / MIB:.1f} MiB ({shrink['trim_s'] * 1e3:.1f} ms); footprint fell "
          f"{shrink['reclaimed_bytes'] / MIB:.1f} MiB over {shrink['events']} points; all {shrink['points']} "
          f"shrink points took {shrink['seconds'] * 1e3:.1f} ms")
    prefill = summary.get("prefill_attention")
    if pool and prefill:
        w(prefill_line(pool["counters"], prefill))
    fused = summary.get("fused_decode")
    if fused:
        reasons = "; ".join(f"{reason} x{n}" for reason, n in fused["reasons"].items()) or "no decode step"
        w(f"decode attention: {fused['fused']} fused / {fused['gather']} gather layer-decisions "
          f"(kernel backend {fused.get('backend')}, registered {fused.get('registered') or 'none'}): {reasons}")
    turns = summary.get("conversations")
    if turns and turns["resumed_turns"]:
        w(f"conversations: {turns['resumed_turns']} turns resumed from kept K/V ({turns['resumed_tokens']} tokens "
          "not recomputed)")
    trim = summary.get("cache_trim")
    if trim and trim["fraction"] is not None:
        w(f"MLX cache: trimmed {trim['trims']} times between prefill chunks ({trim['trimmed_bytes'] / MIB:.1f} MiB "
          f"released; budget {trim['fraction']:.2f} x (weights + cached K/V))")
    probes = summary.get("probe_overhead")
    if probes:
        w(f"probes: {probes['samples']} memory samples ({probes['sample_cost_us_mean']:.0f} us each), "
          f"{probes['snapshots']} pool snapshots ({probes['snapshot_cost_ms_mean']:.2f} ms each), "
          f"cost {probes['cost_fraction'] * 100:.2f}% of wall time")
    recording = summary.get("recording")
    if recording:
        w(f"recording: {recording['path']} "
          f"({'STOPPED, ' + recording['error'] if recording.get('error') else 'the whole run'})")
    prefix = summary.get("prefix_cache")
    if prefix:
        w(f"prefix cache: {prefix['hits']}/{prefix['lookups']} hits, {prefix['cached_tokens']} cached tokens, "
          f"{prefix['shared_blocks']} shared blocks")


def footprint_lines(fp: dict) -> list[str]:
    """The footprint as sampled, then MLX's own peak counter and what a gap between them means: the sampler reads
    max(active+cache) at step boundaries and misses what lasts less than the time between two reads, while MLX's
    counter catches every active peak but not the buffer cache. Neither bounds the true footprint alone."""
    sampled, counter = fp["max_footprint_bytes"], fp["mlx_peak_bytes"]
    where = f"at {fp['samples']} step boundaries" if fp.get("samples") else "in-process"
    lines = [f"footprint: max(active+cache) {sampled / MIB:.1f} MiB, sampled {where} (max active "
             f"{fp['max_active_bytes'] / MIB:.1f}, max cache {fp['max_cache_bytes'] / MIB:.1f}); RSS peak "
             f"{fp['max_rss_bytes'] / MIB:.1f} MiB"]
    if counter > sampled:
        lines.append(f"MLX's peak counter: {counter / MIB:.1f} MiB of active memory alone, above the sampled "
                     "footprint: a short peak fell between two samples, so the footprint reached at least "
                     f"{counter / MIB:.1f} MiB (the counter misses the buffer cache; the sampler misses what lasts "
                     "less than a step)")
    else:
        lines.append(f"MLX's peak counter: {counter / MIB:.1f} MiB of active memory alone (it misses the buffer "
                     "cache, which the sampled footprint includes)")
    return lines


def _mib(value) -> str:
    return "not metered" if value is None else f"{value / MIB:.1f} MiB measured"


def prefill_line(counters: dict, prefill: dict) -> str:
    """The summary's line on prefill attention routes and the bytes reads copied (measured, model beside)."""
    reasons = "; ".join(f"{reason} x{n}" for reason, n in prefill["reasons"].items()) or "no prefill chunk"
    return (f"prefill attention: {prefill['paged']} paged / {prefill['gather']} gather layer-decisions: {reasons}; "
            f"bytes gathered: prefill {_mib(counters.get('prefill_bytes_gathered'))} "
            f"({(counters.get('prefill_bytes_gathered_model') or 0) / MIB:.1f} MiB model), decode "
            f"{_mib(counters.get('decode_bytes_gathered'))} "
            f"({(counters.get('decode_bytes_gathered_model') or 0) / MIB:.1f} MiB model)")
