"""``slabscope bench probes``: what the probes cost, measured.

1. Throughput on vs off: the same workload (real model, a short version of the default scenario unless told
   otherwise) runs in this process in off/on pairs (order alternating) without probes and with ``WorkerProbes``
   (sampling at ``--sample-hz``, pool snapshots at ``--snapshot-hz``, recording to a file, batches sent through a
   bounded multiprocessing queue to a reader process). Prints per pair the
   tokens/s and tokens per CPU-second, then the median pair overhead ((off - on) / off) for both, and the probes'
   own measured cost fraction. Pairs adjacent in time share the background load, so their ratio is robust to a
   busy machine where absolute throughput is not. Target: <= 2%.
2. ``--open-time``: writes a synthetic one-hour session at 10 Hz (real pool bookkeeping ops, keyframes) and
   times ``Session.open``, a seek to the middle and the rebuilt snapshot there. Target: open < 1 s.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from app.commands.arg_types import positive_int


def add_arguments(p) -> None:
    p.add_argument("--scenario", default="churn", help="scenario (default churn, shortened by the --set defaults)")
    p.add_argument("--set", action="append", default=None, metavar="KEY=VALUE",
                   help="scenario overrides (default: n=4 prompt_max=192 gen_max=24)")
    p.add_argument("--backend", default="slab", choices=("slab", "monolithic", "dense"))
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--slab-blocks", type=positive_int, default=None,
                   help="rows per slab of the pool (default: the scenario's); few vs many slabs per layer")
    p.add_argument("--reps", type=positive_int, default=5, help="off/on pairs, alternating which runs first (default 5)")
    p.add_argument("--sample-hz", type=float, default=10.0)
    p.add_argument("--snapshot-hz", type=float, default=2.0)
    p.add_argument("--open-time", action="store_true", help="benchmark opening a one-hour session instead")
    p.add_argument("--hours", type=float, default=1.0, help="length of the synthetic session for --open-time")


def _drain(queue) -> None:
    """Reader process: takes batches off the queue until a None arrives (what the TUI's ingest does)."""
    while queue.get() is not None:
        pass


def _run_once(spec, loaded, probes_on: bool, record_dir: str, rep: int, queue=None) -> dict:
    """One run; returns tokens/s over wall time, tokens per CPU second of this process, and the probe figures."""
    import resource

    from app.workloads.runner import run_workload
    from probes.live import WorkerProbes

    holder: dict = {}

    def attach(meta, session):
        begin = time.perf_counter()
        probes = WorkerProbes(queue, sample_hz=spec.sample_hz, snapshot_hz=spec.snapshot_hz,
                              record_path=os.path.join(record_dir, f"bench-{rep}.slabrec"), meta=meta,
                              weight_bytes=session.loaded.weight_bytes)
        if session.pool is not None:
            probes.attach_pool(session.pool)
        probes.start()
        holder["probes"] = probes
        holder["setup_s"] = time.perf_counter() - begin

    def emit(event):
        if "probes" in holder:
            holder["probes"].emit(event)

    def tick(step, tokens):
        if "probes" in holder:
            holder["probes"].tick(step, tokens)

    usage0, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if probes_on:
        summary = run_workload(spec, emit, tick, loaded=loaded, attach=attach)
        begin = time.perf_counter()
        overhead = holder["probes"].stop(summary)["probe_overhead"]
        overhead = dict(overhead, setup_ms=1e3 * (holder["setup_s"] + time.perf_counter() - begin))
    else:
        summary = run_workload(spec, lambda e: None, None, loaded=loaded)
        overhead = None
    wall, usage1 = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    tokens = summary["prefill_tokens"] + summary["decode_tokens"]
    return {"tok_s": tokens / wall, "tok_per_cpu_s": tokens / cpu, "overhead": overhead, "wall_s": wall}


def _start_reader():
    """A bounded multiprocessing queue drained by a separate process, as in a real run: the probes' transport
    (batching, pickling in the queue's feeder thread) is part of what is measured."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue(maxsize=4096)
    reader = ctx.Process(target=_drain, args=(queue,), daemon=True)
    reader.start()
    return queue, reader


def _pct(off: float, on: float) -> float:
    """Overhead in percent: how much slower the probes-on run was (negative: it was faster, i.e. noise)."""
    return 100.0 * (off - on) / off


def bench_overhead(args) -> int:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: CPU time is not inflated by spinning
    from app.models.registry import load_model
    from app.workloads.scenarios import parse_overrides
    from app.workloads.spec import RunSpec

    overrides = parse_overrides(args.set if args.set is not None else ["n=4", "prompt_max=192", "gen_max=24"])
    spec = RunSpec(scenario=args.scenario, backend=args.backend, model=args.model, overrides=overrides,
                   sample_hz=args.sample_hz, snapshot_hz=args.snapshot_hz, slab_blocks=args.slab_blocks)
    loaded = load_model(args.model)
    pairs = []
    queue, reader = _start_reader()
    with tempfile.TemporaryDirectory() as tmp:
        _run_once(spec, loaded, False, tmp, -1)  # warm-up (compile, caches), not counted
        for rep in range(args.reps):
            runs = {}
            for on in (False, True) if rep % 2 == 0 else (True, False):  # alternate which goes first
                runs[on] = _run_once(spec, loaded, on, tmp, rep, queue)
            pairs.append(runs)
            o = runs[True]["overhead"]
            print(f"pair {rep}: off {runs[False]['tok_s']:7.1f} tok/s ({runs[False]['tok_per_cpu_s']:7.1f} tok/cpu-s)"
                  f" | on {runs[True]['tok_s']:7.1f} tok/s ({runs[True]['tok_per_cpu_s']:7.1f} tok/cpu-s) | probes: "
                  f"{100 * o['cost_fraction']:.2f}% of wall, {o['samples']} samples at {o['sample_cost_us_mean']} us, "
                  f"{o['snapshots']} snapshots at {o['snapshot_cost_ms_mean']} ms, start + stop "
                  f"{o['setup_ms']:.1f} ms (in the timed run)", flush=True)
    queue.put(None)
    reader.join(5)
    wall = [_pct(p[False]["tok_s"], p[True]["tok_s"]) for p in pairs]
    cpu = [_pct(p[False]["tok_per_cpu_s"], p[True]["tok_per_cpu_s"]) for p in pairs]
    own = [p[True]["overhead"]["cost_fraction"] * 100 for p in pairs]
    setup = [100 * p[True]["overhead"]["setup_ms"] / 1e3 / p[True]["wall_s"] for p in pairs]
    slabs = f", --slab-blocks {args.slab_blocks}" if args.slab_blocks else ""
    print(f"scenario {args.scenario} {overrides}{slabs}, backend {args.backend}, model {args.model}, "
          f"sample {args.sample_hz} Hz, snapshots {args.snapshot_hz} Hz, {args.reps} off/on pairs")
    print(f"throughput overhead (wall tok/s, median of pairs): {statistics.median(wall):+.2f}% "
          f"[pairs {min(wall):+.1f}% .. {max(wall):+.1f}%]  target <= 2%")
    print(f"CPU-time overhead (tokens per CPU-second, median of pairs): {statistics.median(cpu):+.2f}% "
          f"[pairs {min(cpu):+.1f}% .. {max(cpu):+.1f}%]")
    print(f"probes' own measured cost (probe thread CPU + workload-thread time in probes) / wall: "
          f"{statistics.median(own):.2f}%")
    print(f"the probes' start (meta, recording file, first snapshot) and stop (final flush, END record), inside the "
          f"probes-on run's wall time: {statistics.median(setup):.2f}% [{min(setup):.2f}-{max(setup):.2f}] (a short "
          "run pays them once: part of the throughput overhead above, not of the own cost)")
    print("note: on a machine shared with other jobs the pair spread shows the noise; the own-cost figure is "
          "measured inline and does not depend on it")
    return 0


def bench_open_time(args) -> int:
    from probes.replay import Session
    from probes.synthetic import write_synthetic_session

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hour.slabrec")
        start = time.perf_counter()
        counts = write_synthetic_session(path, seconds=3600.0 * args.hours)
        print(f"wrote {path}: {counts} in {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        session = Session.open(path)
        opened = time.perf_counter() - start
        print(f"Session.open (header scan, CRC and sequence checks, metadata, {len(session.samples)} samples, "
              f"{len(session.events)} events, {len(session.snapshots)} snapshot summaries decoded, "
              f"{len(session.keyframes)} keyframes indexed): {opened:.3f} s "
              f"({os.path.getsize(path) / 2**20:.1f} MiB)  target < 1 s")
        start = time.perf_counter()
        frame = session.seek(session.duration / 2)
        snap = session.snapshot_at(frame.t)
        print(f"seek to the middle + snapshot rebuilt from keyframe + ops: {1e3 * (time.perf_counter() - start):.1f} ms")
        start = time.perf_counter()
        snap = session.snapshot_at(session.duration * 0.25)
        print(f"backward seek + rebuilt snapshot: {1e3 * (time.perf_counter() - start):.1f} ms "
              f"({snap.stats.num_sequences} sequences, {snap.layers[0].num_chunks} slabs per layer)")
        start = time.perf_counter()
        num_ops = len(session.all_ops())
        print(f"decoding the whole op log ({num_ops} ops, what-if needs it): {time.perf_counter() - start:.3f} s")
    return 0


def main(args) -> int:
    return bench_open_time(args) if args.open_time else bench_overhead(args)
