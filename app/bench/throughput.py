"""``slabscope bench throughput``: slabscope's backends and mlx-lm's ``BatchGenerator`` on the same prompts, in one
process (warm) and each in a fresh process (what a user's first run sees).

Warm: the model is loaded once; a warm-up round runs every engine once (it pays MLX's and our kernel builds and is
reported apart), then ``rounds`` interleaved rounds run every engine once each, the order rotating every round so
no engine always runs first or last. Fresh: each engine runs ``fresh_rounds`` times in a newly spawned process of its
own (model loaded there, nothing cached in memory). Figures per run: wall tok/s (prompt + generated tokens over the
run's wall time), prefill tok/s, median decode step (ms), first decode step (ms) and the footprint (max(active +
cache) sampled during the run, MiB: no verdict is taken on it); per engine the median and
range (min-max) over runs. The verdict compares engines pairwise on wall tok/s and median decode step and names
a winner only when their ranges do not overlap (timing on shared machines varies by up to 30% between runs).

Between engines (``app/bench/engine_memory.py``): after every run in the warm process, what it left is released
(a collection, then MLX's buffer cache) and the progress line says how much and what the process holds after; an
engine that runs out of memory (warm or fresh) gets "out of memory" as that run's result, in its row and in
``--json``, and the other engines go on.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
import time
from dataclasses import dataclass
from typing import NamedTuple

from app.bench.engine_memory import is_out_of_memory, out_of_memory_result, release
from app.bench.progress import RunClock, as_clock
from app.bench.stats import spread_by_field
from app.bench.workload import BenchWorkload, check_engines
from app.workloads.inflight_bound import DEFAULT_ALLOWANCE as DEFAULT_INFLIGHT, parse_allowance

ENGINES = ("dense", "slab", "monolithic", "mlx_lm")
DEFAULT_ENGINES = ("dense", "slab", "mlx_lm")
POOL_ENGINES = ("slab", "monolithic")  # may carry their own rows per slab: "slab:128" (``engine_parts``)
INFLIGHT_ENGINES = ("dense", "slab", "monolithic")  # may carry their own in-flight allowance: "slab@8G"


class EngineName(NamedTuple):
    """An engine name's parts: ``BACKEND[:ROWS][@INFLIGHT]``."""

    backend: str
    rows: int | None           # rows per slab (pool engines); None: the bench's --slab-blocks
    inflight: int | None       # prefill in-flight allowance in bytes (None: off), when ``own_inflight``
    own_inflight: bool = False  # False: the bench's --prefill-inflight


def engine_parts(engine: str) -> EngineName:
    """The parts of an engine name: ``slab``, ``slab:128`` (a pool engine at its own rows per slab), ``slab@8G`` /
    ``dense@off`` (a slabscope engine under its own prefill in-flight allowance), ``slab:128@8G``, ``mlx_lm``: so
    sizes and allowances run interleaved in one bench, each its own engine. ValueError (one line) otherwise."""
    name, at, allowance = engine.partition("@")
    backend, colon, rows = name.partition(":")
    if colon and (backend not in POOL_ENGINES or not rows.isdigit() or int(rows) < 1 or rows != str(int(rows))):
        raise ValueError(f"engine {engine!r}: only {' and '.join(POOL_ENGINES)} take rows per slab, as NAME:ROWS "
                         "with ROWS a positive int (e.g. slab:128)")
    size = int(rows) if colon else None
    if not at:
        return EngineName(backend, size, None)
    if backend not in INFLIGHT_ENGINES:
        raise ValueError(f"engine {engine!r}: only {', '.join(INFLIGHT_ENGINES)} take a prefill in-flight "
                         "allowance, as NAME@BYTES or NAME@off (e.g. slab@8G)")
    return EngineName(backend, size, _allowance(engine, allowance), True)


def _allowance(engine: str, text: str) -> int | None:
    """The bytes of an engine's ``@`` suffix (``off``: None); ValueError naming the engine otherwise."""
    try:
        return parse_allowance(text)
    except ValueError as exc:
        raise ValueError(f"engine {engine!r}: the in-flight allowance after @ must be a byte size (e.g. 8G) or off: "
                         f"{exc}") from None


def check_bench_engines(engines: tuple) -> None:
    """ValueError (one line) unless every engine is known (``engine_parts``) and none is named twice."""
    check_engines(tuple(engine_parts(e).backend for e in engines), ENGINES)
    repeated = sorted({e for e in engines if engines.count(e) > 1})
    if repeated:
        raise ValueError(f"engine(s) named twice: {', '.join(repeated)}")


METRICS = {  # name -> (label, higher is better)
    "tok_s": ("wall tok/s", True),
    "prefill_tok_s": ("prefill tok/s", True),
    "decode_step_ms": ("decode step ms (median)", False),
    "first_decode_step_ms": ("first decode step ms", False),
    "footprint_mib": ("max(active+cache) MiB", False),  # sampled in the run (slabscope's probes, mlx-lm's sampler)
}
VERDICT_METRICS = ("tok_s", "decode_step_ms")
MIN_RUNS_FOR_VERDICT = 5  # fewer runs than this per engine: no winner is named whatever the ranges


@dataclass
class BenchConfig(BenchWorkload):
    """Everything a run of the bench depends on (picklable: fresh-process children receive it)."""

    engines: tuple = DEFAULT_ENGINES
    rounds: int = 5
    fresh_rounds: int = 1
    seed: int = 0
    cache_limit: int | None = None   # MLX cache limit in bytes, applied to every engine alike
    prefill_trim: float | str | None = "auto"  # slabscope engines' prefill cache trim (RunSpec.trim_fraction)
    prefill_inflight: int | None = DEFAULT_INFLIGHT  # slabscope engines' prefill in-flight bound (inflight_bound.py)
    shrink: str = "off"                # pool engines' shrink policy (pool/shrink_types.py)
    shrink_budget: int | None = None   # bytes a shrink point may move (None: the pool's default)
    open_blocks: str = "auto"          # pool engines' open-block rows (RunSpec.open_blocks)
    prefill_batch_tokens: int | None = None  # slabscope engines' prefill step budget (None: the device's default)
    slab_blocks: int | None = None     # rows per slab (None: the scenario's, else the pool's default)

    def __post_init__(self) -> None:
        check_bench_engines(self.engines)
        if self.rounds < 1 or self.fresh_rounds < 0:
            raise ValueError("rounds must be >= 1 and fresh_rounds >= 0")
        from app.workloads.spec import RunSpec

        # the slabscope engines' run parameters, refused before any engine runs (RunSpec's own checks)
        RunSpec(cache_limit=self.cache_limit, prefill_trim=self.prefill_trim, prefill_inflight=self.prefill_inflight,
                shrink=self.shrink, shrink_budget=self.shrink_budget, open_blocks=self.open_blocks,
                slab_blocks=self.slab_blocks)


def run_engine(engine: str, config: BenchConfig, loaded, requests) -> dict:
    """One run of ``engine`` on ``loaded`` over the scenario; the four figures (and the footprint)."""
    import mlx.core as mx

    previous = mx.set_cache_limit(config.cache_limit) if config.cache_limit is not None else None
    try:
        if engine == "mlx_lm":
            from app.bench.mlxlm_baseline import run_batchgenerator

            run = run_batchgenerator(loaded, requests, seed=config.seed)
            steps = run["decode_step_s"]
            return _figures(run["tok_s"], run["prefill_tok_s"], steps, run["first_decode_step_s"],
                            run["max_footprint_bytes"])
        return _slabscope_run(engine, config, loaded)
    finally:
        if previous is not None:
            mx.set_cache_limit(previous)


def _figures(tok_s, prefill_tok_s, steps: list[float], first: float | None, footprint: int) -> dict:
    return {"tok_s": tok_s, "prefill_tok_s": prefill_tok_s,
            "decode_step_ms": statistics.median(steps) * 1e3 if steps else None,
            "first_decode_step_ms": first * 1e3 if first is not None else None, "footprint_bytes": footprint,
            "footprint_mib": footprint / 2**20 if footprint else None}


def _slabscope_run(engine: str, config: BenchConfig, loaded) -> dict:
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec
    from probes.events import Step

    parts = engine_parts(engine)
    spec = RunSpec(scenario=config.scenario, backend=parts.backend, model=config.model, dtype=config.dtype,
                   device=config.device, overrides=dict(config.overrides), seed=config.seed,
                   cache_limit=config.cache_limit, prefill_trim=config.prefill_trim,
                   prefill_inflight=parts.inflight if parts.own_inflight else config.prefill_inflight,
                   shrink=config.shrink, shrink_budget=config.shrink_budget, open_blocks=config.open_blocks,
                   prefill_batch_tokens=config.prefill_batch_tokens,
                   slab_blocks=parts.rows if parts.rows is not None else config.slab_blocks)
    events: list = []
    summary = run_workload(spec, events.append, loaded=loaded)
    decode = [e.wall_s for e in events if isinstance(e, Step) and e.type == "decode"]
    tokens = summary["prefill_tokens"] + summary["decode_tokens"]
    prefill_s = sum(p["prefill_s"] for p in summary["phases"].values())
    out = _figures(tokens / summary["wall_s"] if summary["wall_s"] else None,
                   summary["prefill_tokens"] / prefill_s if prefill_s else None, decode,
                   decode[0] if decode else None, summary["footprint"]["max_footprint_bytes"])
    out["rehearsal_s"] = summary.get("rehearsal_s")  # before the run, outside its figures (None: none ran)
    fused = summary.get("fused_decode") or {}
    if fused:
        out["fused_layer_steps"], out["gather_layer_steps"] = fused.get("fused"), fused.get("gather")
        out["declines"] = {r: n for r, n in (fused.get("reasons") or {}).items() if not r.startswith("fused")}
    return out


def load(config: BenchConfig):
    """(loaded model, the scenario's requests) for ``config``."""
    from app.bench.mlxlm_baseline import scenario_requests
    from app.models import load_model

    loaded = load_model(config.model, dtype=config.dtype, device=config.device, seed=config.seed)
    return loaded, scenario_requests(config.scenario, config.overrides, loaded, config.seed)


def warm_runs(config: BenchConfig, progress=None) -> tuple[dict, dict]:
    """(warm-up round {engine: figures}, rounds {engine: [figures per round]}) in this process."""
    clock = as_clock(progress, len(config.engines) * (1 + config.rounds))
    clock.note(f"loading model {config.model}…")
    loaded, requests = load(config)
    warmup = {}
    for engine in config.engines:
        warmup[engine] = guarded_run(engine, config, loaded, requests, clock, "warm-up")
    rounds: dict = {engine: [] for engine in config.engines}
    engines = list(config.engines)
    for index in range(config.rounds):
        shift = index % len(engines)
        for engine in engines[shift:] + engines[:shift]:
            rounds[engine].append(guarded_run(engine, config, loaded, requests, clock, f"round {index + 1}"))
    return warmup, rounds


def guarded_run(engine: str, config: BenchConfig, loaded, requests, clock: RunClock, where: str) -> dict:
    """One warm run of ``engine``: its figures, or its out-of-memory result (any other error propagates); then
    what the run left is released before the next engine runs, and both are said on one progress line (``clock``:
    '[k/N] where engine…' before, its figures and the estimated time left after)."""
    clock.start(f"{where} {engine}")
    try:
        figures = run_engine(engine, config, loaded, requests)
    except Exception as exc:  # noqa: BLE001 - only an out-of-memory is a result; the rest re-raises
        if not is_out_of_memory(exc):
            raise
        figures = out_of_memory_result(exc)
    freed = release()
    figures["released"] = freed.to_json()
    clock.done(f"{where} {engine}", f"{_line(figures)}; {freed.line()}")
    return figures


def _fresh_child(engine: str, config: BenchConfig, queue) -> None:
    try:
        from app.models.blas import enable_openblas

        enable_openblas()
        start = time.perf_counter()
        loaded, requests = load(config)
        load_s = time.perf_counter() - start
        queue.put({"ok": run_engine(engine, config, loaded, requests) | {"load_s": load_s}})
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def fresh_runs(config: BenchConfig, progress=None, timeout_s: float = 900.0) -> dict:
    """{engine: [figures per fresh process]}: each run in a newly spawned process (nothing cached in memory)."""
    clock = as_clock(progress, len(config.engines) * config.fresh_rounds)
    ctx = mp.get_context("spawn")
    out: dict = {engine: [] for engine in config.engines}
    for index in range(config.fresh_rounds):
        for engine in config.engines:
            queue = ctx.Queue()
            child = ctx.Process(target=_fresh_child, args=(engine, config, queue), daemon=True)
            clock.start(f"fresh {index + 1} {engine}: a new process loads the model and runs")
            child.start()
            try:
                result = queue.get(timeout=timeout_s)
            except Exception:  # noqa: BLE001 - the child died or hung
                result = {"error": f"no result within {timeout_s:.0f} s (exit code {child.exitcode})"}
            child.join(10)
            if child.is_alive():
                child.kill()
            out[engine].append(fresh_result(engine, result))
            clock.done(f"fresh {index + 1} {engine}", _line(out[engine][-1]))
    return out


class EngineFailed(RuntimeError):
    """An engine's run failed for another reason than memory (one line: the bench stops)."""


def fresh_result(engine: str, result: dict) -> dict:
    """A fresh child's answer as that run's figures: its figures, its out-of-memory result, or EngineFailed."""
    if "error" not in result:
        return result["ok"]
    if is_out_of_memory(result["error"]):
        return out_of_memory_result(result["error"])
    raise EngineFailed(f"fresh {engine} run failed: {result['error']}")


def summarize(runs: list[dict], metrics=METRICS) -> dict:
    """{metric: {"median", "min", "max", "n"}} over runs (metrics a run lacks are skipped), and
    ``out_of_memory`` {"runs", "of", "detail"} when some runs ran out of memory."""
    stats = spread_by_field([run for run in runs if "error" not in run], metrics)
    failed = [run for run in runs if run.get("error") == "out of memory"]
    if failed:
        stats["out_of_memory"] = {"runs": len(failed), "of": len(runs), "detail": failed[0].get("detail", "")}
    return stats


def verdicts(stats: dict) -> list[dict]:
    """Pairwise verdicts on VERDICT_METRICS: a winner only when both engines have MIN_RUNS_FOR_VERDICT runs and
    their ranges do not overlap."""
    out = []
    engines = list(stats)
    for i, a in enumerate(engines):
        for b in engines[i + 1:]:
            for metric in VERDICT_METRICS:
                if metric not in stats[a] or metric not in stats[b]:
                    continue
                sa, sb = stats[a][metric], stats[b][metric]
                ratio = sa["median"] / sb["median"] if sb["median"] else None
                overlap = sa["min"] <= sb["max"] and sb["min"] <= sa["max"]
                few = min(sa["n"], sb["n"]) < MIN_RUNS_FOR_VERDICT
                if overlap or few:
                    winner = None
                else:
                    higher = METRICS[metric][1]
                    a_better = sa["median"] > sb["median"] if higher else sa["median"] < sb["median"]
                    winner = a if a_better else b
                out.append({"metric": metric, "a": a, "b": b, "ratio_a_over_b": ratio, "winner": winner,
                            "text": _verdict_text(metric, a, b, ratio, winner,
                                                  min(sa["n"], sb["n"]) if few else None)})
    return out


def _verdict_text(metric: str, a: str, b: str, ratio, winner, few_runs: int | None = None) -> str:
    label = METRICS[metric][0]
    ratio_text = f"{ratio:.2f}x" if ratio is not None else "n/a"
    if few_runs is not None:
        return (f"{label}: {a} / {b} = {ratio_text} (medians); only {few_runs} run(s), fewer than "
                f"{MIN_RUNS_FOR_VERDICT}: no winner")
    if winner is None:
        return f"{label}: {a} / {b} = {ratio_text} (medians); ranges overlap: no winner"
    return f"{label}: {a} / {b} = {ratio_text} (medians); ranges do not overlap: {winner} wins"


def run_bench(config: BenchConfig, progress=None) -> dict:
    """The whole bench: warm-up round, interleaved warm rounds, fresh-process runs, stats and verdicts."""
    import mlx.core as mx

    started = time.strftime("%Y-%m-%d %H:%M:%S")
    clock = RunClock(len(config.engines) * (1 + config.rounds + config.fresh_rounds), progress)
    warmup, rounds = warm_runs(config, clock)
    fresh = fresh_runs(config, clock) if config.fresh_rounds else {}
    warm_stats = {engine: summarize(runs) for engine, runs in rounds.items()}
    fresh_stats = {engine: summarize(runs) for engine, runs in fresh.items()}
    return {"started": started, "device": str(mx.default_device()), "mlx": mx.__version__,
            "config": {**config.__dict__, "engines": list(config.engines)},
            "machine_note": os.environ.get("SLABSCOPE_BENCH_NOTE", ""),
            "warmup_round": warmup, "rounds": rounds, "fresh": fresh,
            "warm": warm_stats, "fresh_stats": fresh_stats,
            "verdicts": {"warm": verdicts(warm_stats), "fresh": verdicts(fresh_stats)}}


def _fmt(value, metric: str) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if metric.endswith(("tok_s", "_mib")) else f"{value:.2f}"


def _line(figures: dict) -> str:
    if figures.get("error"):
        return f"{figures['error']} ({figures.get('detail', '')})"
    return ", ".join(f"{METRICS[m][0]} {_fmt(figures.get(m), m)}" for m in METRICS)


def _oom_cell(per_metric: dict) -> str:
    oom = per_metric.get("out_of_memory")
    return "" if oom is None else f"  out of memory in {oom['runs']} of {oom['of']} runs ({oom['detail']})"


def prefill_batch_note(config: dict, device: str) -> str:
    """The prefill schedule of slabscope's engines (mlx-lm's BatchGenerator prefills its prompts together)."""
    from app.workloads.spec import DEFAULT_PREFILL_BATCH_TOKENS

    chosen = config.get("prefill_batch_tokens")
    tokens = DEFAULT_PREFILL_BATCH_TOKENS["gpu" if "gpu" in device else "cpu"] if chosen is None else chosen
    how = "the device's default" if chosen is None else "--prefill-batch-tokens"
    if tokens == 0:
        return f"slabscope's prefill steps: one sequence each ({how})"
    return f"slabscope's prefill steps: up to {tokens:,} tokens over the sequences at the same chunk ({how})"


def _inflight_note(config: dict) -> str:
    """The report's words on the prefill in-flight bound: the bench's allowance, and whether an engine named
    ``NAME@BYTES`` runs under its own."""
    own = any(engine_parts(engine).own_inflight for engine in config["engines"])
    but = ", but an engine named NAME@BYTES: its own" if own else ""
    if config.get("prefill_inflight") is None:
        return f"; prefill in flight unbounded (slabscope engines{but})" if own else ""
    return (f"; prefill in flight <= {config['prefill_inflight'] / 2**20:,.0f} MiB above weights + K/V "
            f"(slabscope engines{but})")


def format_report(result: dict) -> str:
    """The human-readable tables (warm, fresh) and the verdicts."""
    config = result["config"]
    lines = [f"bench throughput: {config['scenario']} {config['overrides']} on {config['model']} "
             f"({result['device']}, MLX {result['mlx']}); {config['rounds']} warm rounds after a warm-up round, "
             f"{config['fresh_rounds']} fresh process(es) per engine"
             + (f"; MLX cache limit {config['cache_limit']} B" if config.get("cache_limit") is not None else "")
             + _inflight_note(config)
             + (f"; {config['slab_blocks']} rows per slab" if config.get("slab_blocks") is not None else "")]
    lines.append(prefill_batch_note(config, result["device"]))
    lines.append(rehearsal_note(result))
    for title, stats in (("warm (one process, median [min-max])", result["warm"]),
                         ("fresh process (median [min-max])", result["fresh_stats"])):
        if not stats:
            continue
        width = max(10, *(len(engine) for engine in stats))
        lines += ["", title, f"{'engine':<{width}} " + " ".join(f"{METRICS[m][0]:>28}" for m in METRICS)]
        for engine, per_metric in stats.items():
            cells = []
            for metric in METRICS:
                s = per_metric.get(metric)
                cells.append(f"{'-':>28}" if s is None else
                             f"{_fmt(s['median'], metric) + ' [' + _fmt(s['min'], metric) + '-' + _fmt(s['max'], metric) + ']':>28}")
            lines.append(f"{engine:<{width}} " + " ".join(cells) + _oom_cell(per_metric))
    for kind in ("warm", "fresh"):
        if result["verdicts"].get(kind):
            lines += ["", f"verdicts ({kind}):"] + [f"  {v['text']}" for v in result["verdicts"][kind]]
    return "\n".join(lines)


def rehearsal_note(result: dict) -> str:
    """What ran before each timed run: slabscope's engines rehearse at load on a GPU (app/workloads/rehearsal.py,
    outside their figures), in the warm rounds' process and in each fresh one alike; mlx-lm's engine has no such
    step, so its fresh-process figures hold its first uses."""
    parts = []
    for label, runs in (("warm rounds", [result.get("warmup_round", {})] + _by_round(result.get("rounds", {}))),
                        ("fresh processes", _by_round(result.get("fresh", {})))):
        seconds = sorted(run["rehearsal_s"] for by_engine in runs for run in by_engine.values()
                         if run.get("rehearsal_s") is not None)
        if seconds:
            parts.append(f"{label}: median {statistics.median(seconds):.2f} s, {seconds[0]:.2f}-{seconds[-1]:.2f} s")
    if not parts:
        return ("load-time rehearsal: none ran (a CPU run or $SLABSCOPE_REHEARSAL=0); every engine's first uses "
                "fall in its runs")
    return (f"load-time rehearsal: slabscope engines, before each run and outside its figures ({'; '.join(parts)}); "
            "mlx_lm: none, its fresh-process figures include its first uses")


def _by_round(per_engine: dict) -> list[dict]:
    """{engine: [run, ...]} as [{engine: run}, ...] (one dict per round; engines short of a round are left out)."""
    rounds = max((len(runs) for runs in per_engine.values()), default=0)
    return [{e: runs[i] for e, runs in per_engine.items() if i < len(runs)} for i in range(rounds)]


def to_json(result: dict) -> str:
    return json.dumps(result, default=str)
