"""``slabscope record``: headless recording of a scenario on several backends, then the compare table.

Each backend runs in its own worker process (``app.workloads.WorkerHandle``), one after another by default (so
they do not share the CPU, caches or memory bandwidth), side by side with ``--together`` (one BLAS thread each).
Every worker writes ``DIR/<scenario>-<backend>.slabrec`` through its probes; the command claims every such file
before the first worker starts (``app.commands.outputs``): an existing file is refused unless ``--force``, and a
second ``record`` into the same directory at once refuses with one line. Parser construction imports no mlx.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from app.commands.arg_types import (add_mlx_cache_arguments, add_open_blocks_argument, add_shrink_arguments,
                                    backends_list, finite_float, positive_int)
from app.commands.errors import output_dir
from app.commands.metrics_args import add_metrics_arguments, hold_metrics, start_metrics
from app.commands.outputs import add_force_argument
from app.commands.record_ranks import Stopped, stop_on_signals
from app.commands.record_specs import run_specs
from app.models.registry import DTYPE_NAMES
from app.workloads.limits import MAX_SAMPLE_HZ

MIB = 1024 * 1024


def add_parser(sub) -> None:
    p = sub.add_parser("record", help="record a scenario on several backends (own processes) and compare them",
                       description="Runs each backend in its own process, writes one session file per backend "
                       "into --out and prints the compare table. Exit status 1 if a backend failed.")
    p.add_argument("--scenario", default=None, help="scenario name or .toml path (default: the default scenario)")
    p.add_argument("--backends", type=backends_list, default=["slab", "dense", "monolithic"],
                   help="comma-separated, each once: slab,dense,monolithic (default all three)")
    p.add_argument("--out", required=True, help="directory for the session files (DIR/<scenario>-<backend>.slabrec)")
    add_force_argument(p, "a session file of an earlier run in --out")
    p.add_argument("--model", default="smollm2-135m", help="model name or mlx-lm directory")
    p.add_argument("--together", action="store_true", help="run the backends side by side (default: one by one)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario parameter")
    p.add_argument("--block-size", type=positive_int, default=None)
    p.add_argument("--slab-blocks", type=positive_int, default=None)
    p.add_argument("--sample-hz", type=finite_float(0.0, MAX_SAMPLE_HZ), default=10.0,
                   help="memory samples per second (default 10)")
    p.add_argument("--snapshot-hz", type=finite_float(0.0, MAX_SAMPLE_HZ), default=2.0,
                   help="pool snapshots per second (default 2)")
    p.add_argument("--dtype", default=None, choices=DTYPE_NAMES)
    p.add_argument("--device", choices=("cpu", "gpu"), default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=finite_float(0.0, above=True), default=3600.0,
                   help="seconds before a backend is cancelled")
    from app.commands.record_ranks import add_arguments

    add_arguments(p)
    add_mlx_cache_arguments(p, who="every backend alike")
    add_shrink_arguments(p, who="the pool backends (slab, monolithic)")
    add_open_blocks_argument(p)
    add_metrics_arguments(p)  # not with --ranks
    p.set_defaults(func=main)


class _Progress:
    """Folds a worker's events into one status line per backend (``probes.progress``: stage or phase, requests
    k/N, tokens, estimated time left; then the step and the footprint now); hands each to ``metrics``
    (``probes.prometheus.RunMetrics``, labelled with the backend) when given. A new stage or phase is shown at
    once."""

    def __init__(self, backend: str, stream, metrics=None) -> None:
        from probes.progress import RunProgress

        self.backend, self.stream, self.metrics = backend, stream, metrics
        self.run = RunProgress()
        self.step, self.footprint = 0, 0
        self._last_print = 0.0
        self._shown_stage = ""
        self.tty = stream.isatty()

    def on_event(self, event) -> None:
        from probes.events import Sample, WorkerError

        if self.metrics is not None:
            self.metrics.observe(event, self.backend)
        self.run.fold(event)
        match event:
            case Sample(footprint=footprint):
                self.footprint = footprint
            case WorkerError(text=text):
                self.stream.write(f"\n[{self.backend}] error: {text}\n")
        self.step = max(self.step, event.step)
        if self.run.stage != self._shown_stage:  # a new stage or phase: said now, not at the next tick
            self._shown_stage = self.run.stage
            self._last_print = 0.0

    def line(self) -> str:
        tail = f"  step {self.step}, act+cache now {self.footprint / MIB:.1f} MiB" if self.run.phase_index >= 0 else ""
        return f"[{self.backend:<10}] {self.run.text(time.monotonic())}{tail}"

    def show(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or (self.tty and now - self._last_print > 0.2) or now - self._last_print > 5.0:
            self.stream.write(("\r" if self.tty else "") + self.line() + ("" if self.tty else "\n"))
            self.stream.flush()
            self._last_print = now


def _run(handles_and_progress, timeout: float) -> None:
    """Poll the given workers until each finished, died or timed out (then cancelled)."""
    deadline = time.monotonic() + timeout
    pending = list(handles_and_progress)
    while pending:
        for handle, progress in list(pending):
            for event in handle.poll():
                progress.on_event(event)
            progress.show()
            if handle.done or (not handle.alive and handle.exitcode is not None):
                for event in handle.poll():
                    progress.on_event(event)
                progress.show(force=True)
                if progress.tty:
                    progress.stream.write("\n")
                pending.remove((handle, progress))
                handle.close()  # its queue and stop event (named semaphores) go now, not at exit
            elif time.monotonic() > deadline:
                handle.cancel()
                progress.stream.write(f"\n[{progress.backend}] cancelled after {timeout:.0f} s\n")
                pending.remove((handle, progress))
                handle.close()
        time.sleep(0.1)


def main(args) -> int:
    import dataclasses

    from app.commands.errors import UsageError
    from app.commands.outputs import claim_recordings, recording_problem, release_all, scenario_inputs
    from app.workloads.scenarios import ScenarioError

    if getattr(args, "ranks", None) is not None:
        from app.commands.record_ranks import main as record_ranks

        if args.metrics_port is not None:
            raise UsageError("--metrics-port serves one process's runs; it does not combine with --ranks")
        return record_ranks(args)
    try:
        specs = run_specs(args, args.backends)
    except (ScenarioError, ValueError) as exc:
        print(f"slabscope record: {exc}", file=sys.stderr)
        return 2
    output_dir(args.out, "--out")
    claims = claim_recordings([spec.record_path for spec in specs], args.force, scenario_inputs(args.scenario))
    specs = [dataclasses.replace(spec, record_claim=held.token) for spec, held in zip(specs, claims)]
    metrics = None
    handles: list = []
    replaced = stop_on_signals() if _main_thread() else {}
    try:
        metrics = start_metrics(args)
        _record(specs, args, metrics, handles)
    except Stopped as stop:  # SIGTERM, SIGHUP, Ctrl-C: every worker stopped and released, nothing else starts
        _stop_all(handles)
        print(f"slabscope record: stopped by {stop}: {len(handles)} of {len(specs)} backends started, every worker "
              "stopped", file=sys.stderr)
        return 128 + stop.signum
    finally:
        for sig, previous in replaced.items():
            signal.signal(sig, previous)
        release_all(claims)  # the files are finished (or removed: a worker that never recorded)
        hold_metrics(args, metrics)
    problems = [(handle, handle.error or recording_problem(handle.summary)) for handle, _ in handles]
    for handle, problem in problems:
        state = "ok" if handle.done and not problem else f"FAILED: {problem or 'no result'}"
        print(f"{handle.spec.backend}: {handle.spec.record_path} ({state}; worker log {handle.log_path})")
    paths = [h.spec.record_path for h, _ in handles if os.path.exists(h.spec.record_path)]
    if paths:
        _print_compare(paths)
    return 1 if any(problem or not handle.done for handle, problem in problems) else 0


def _record(specs, args, metrics, handles: list) -> None:
    """Run the backends (one by one, or together), appending each (handle, progress) pair to ``handles`` as it
    starts (so a stop finds every started worker)."""
    from app.workloads import WorkerHandle

    out = sys.stderr
    groups = [specs] if args.together else [[s] for s in specs]
    for group in groups:
        started = []
        for spec in group:
            started.append((WorkerHandle(spec).start(), _Progress(spec.backend, out, metrics)))
            handles.append(started[-1])
        _run(started, args.timeout)


def _stop_all(handles: list) -> None:
    """Cancel every started worker (each within a second) and release its queue and stop event."""
    for handle, _ in handles:
        handle.cancel()
        handle.close()


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _print_compare(paths: list[str]) -> None:
    from app.commands.session_files import open_sessions, pick_baseline
    from probes.compare import compare_sessions, format_table

    sessions, error = open_sessions(paths)
    if error:
        print(f"slabscope record: {error}", file=sys.stderr)
        return
    baseline = pick_baseline(sessions, None)
    print(f"\nbaseline: {sessions[baseline].meta.get('backend')}")
    print(format_table(compare_sessions(sessions, baseline=baseline)))
    for s in sessions:
        print(f"probe cost ({s.meta.get('backend')}): {_overhead_line(s.overhead)}")
    for s in sessions:
        print(f"load-time rehearsal ({s.meta.get('backend')}): {rehearsal_line(s.meta.get('rehearsal'))}")


def rehearsal_line(report: dict | None) -> str:
    """One line from a run's ``rehearsal`` metadata (app/workloads/rehearsal.py; None: it did not run)."""
    if not report:
        return "not run (a CPU run, $SLABSCOPE_REHEARSAL=0 or no request phase): first uses fall in the run"
    sizes = [str(n) for n in report["batches"]]
    batches = (f"{len(sizes)} batch{'es' if len(sizes) > 1 else ''} of "
               f"{', '.join(sizes[:-1]) + ' and ' + sizes[-1] if len(sizes) > 1 else sizes[0]} sequences")
    return (f"{report['seconds']:.2f} s before the run, outside its tok/s ({batches}, "
            f"{report['model_prefill_tokens']} tokens prefilled by the model, {report['zero_filled_tokens']} "
            f"zero-filled, {report['decode_steps']} decode steps; peak active "
            f"{report['peak_active_bytes'] / 2**20:,.0f} MiB)")


def _overhead_line(o) -> str:
    """One line from a session's ``ProbeOverhead`` (None: not recorded)."""
    if o is None:
        return "not recorded"
    return (f"{100 * o.cost_fraction:.2f}% of wall time (probe thread CPU {o.probe_thread_cpu_s} s, "
            f"workload-thread time in probes {o.workload_thread_s} s, {o.samples} samples at "
            f"{o.sample_cost_us_mean} us, {o.snapshots} snapshots at {o.snapshot_cost_ms_mean} ms)")
