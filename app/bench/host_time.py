"""``slabscope bench host``: the host's share of every forward pass, per engine, on the same schedule.

A GPU step costs the host two things before the device can run it: building the step's lazy graph (the backend's
caches and the model's Python: one MLX primitive per array operation) and handing it over (``mx.async_eval``:
encoding and launching a kernel per primitive that computes). When the host needs longer for a step than the device,
the device waits: that is what bounded the H200's prefill. Each step here is built, dispatched and awaited in
sequence (no pipelining), so the three phases are measured apart:

* ``build_ms``: from the step's start to its graph built (cache objects, writes, gathers, the model call), and
  ``build_cpu_ms``, the same span in this thread's CPU time (on a shared machine, wall time also counts the time
  the thread waited for a core);
* ``dispatch_ms``: ``mx.async_eval`` of the step's outputs (on the CPU it only queues the work);
* ``wait_ms``: until the outputs are evaluated (device time not hidden behind the host's);
* ``ops``: MLX primitives in the step's graph (``mx.export_to_dot``, counted outside the timings), and which.

Engines: ``slab``, ``monolithic``, ``dense`` (slabscope's backends: prefill runs the model's trunk, decode the whole
model on one token per sequence), ``mlx_lm`` (mlx-lm's own calls: ``generate_step``'s prefill, the whole model on a
``KVCache`` with the logits left lazy, and a ``BatchKVCache`` decode step). They run interleaved: one step of each
engine in turn, the order rotating every step, over the same scheduler plans (same prompts and seeds), so a
shared machine's noise falls on every engine alike. Figures per kind of step: median and range over its steps.
"""

from __future__ import annotations

import collections
import os
import re
import tempfile
import time
from dataclasses import dataclass

from app.bench.stats import spread_by_field
from app.bench.workload import BenchWorkload, check_engines

ENGINES = ("slab", "monolithic", "dense", "mlx_lm")
DEFAULT_ENGINES = ("slab", "dense", "mlx_lm")
PHASES = ("build_ms", "build_cpu_ms", "dispatch_ms", "host_ms", "wait_ms", "ops")
HEADINGS = ("build", "build (CPU)", "dispatch", "host", "wait")  # the table's columns: PHASES but ops


@dataclass
class HostConfig(BenchWorkload):
    """What one host-time bench depends on."""

    engines: tuple = DEFAULT_ENGINES
    prefill_chunk: int | None = None  # None: the scenario's
    seed: int = 0
    count_ops: bool = True
    slab_blocks: int | None = None  # None: the scenario's
    emulate_cuda: bool = False  # the CUDA fused route's host side on this machine (app/bench/host_emulation.py)
    open_blocks: str = "auto"  # the pool engines' open-block rows (RunSpec.open_blocks)

    def __post_init__(self) -> None:
        check_engines(self.engines, ENGINES)


def graph_ops(arrays: list) -> collections.Counter:
    """Primitives of the unevaluated graph behind ``arrays`` by name (evaluated inputs count as none)."""
    import mlx.core as mx

    handle, path = tempfile.mkstemp(suffix=".dot")
    os.close(handle)
    try:
        mx.export_to_dot(path, *arrays)
        with open(path) as f:
            return collections.Counter(re.findall(r'label ="([^"]+)", shape=rectangle', f.read()))
    finally:
        os.unlink(path)


class EngineSteps:
    """One engine's session, stepped one forward pass at a time with each phase timed. Owns the session."""

    def __init__(self, engine: str, config: HostConfig, loaded, scenario):
        from app.workloads.session import build_session
        from app.workloads.spec import RunSpec

        spec = RunSpec(scenario=config.scenario, backend="dense" if engine == "mlx_lm" else engine,
                       model=loaded.name, dtype=config.dtype, device=config.device, seed=config.seed,
                       overrides=dict(config.overrides), prefill_chunk=config.prefill_chunk, prefill_trim=None,
                       slab_blocks=config.slab_blocks, open_blocks=config.open_blocks)
        self.engine = engine
        self.count_ops = config.count_ops
        self.session = build_session(spec, scenario, loaded=loaded)
        for phase in scenario.phases:
            self.session.submit_phase(phase)
        self.steps: dict[str, list[dict]] = {"prefill": [], "decode": []}

    def step(self) -> bool:
        """Run the next forward pass; False when the schedule is done (the session is closed then)."""
        import mlx.core as mx

        from app.workloads.scheduler import PrefillPlan

        session = self.session
        session.scheduler.admit()
        plan = session.scheduler.plan()
        if plan is None:
            session.close()
            return False
        c0, t0 = time.thread_time(), time.perf_counter()
        kind, arrays = ("prefill", self._build_prefill(plan)) if isinstance(plan, PrefillPlan) else \
            ("decode", self._build_decode(plan))
        t1, c1 = time.perf_counter(), time.thread_time()
        ops = graph_ops(arrays) if self.count_ops else None
        t2 = time.perf_counter()
        mx.async_eval(arrays)
        t3 = time.perf_counter()
        mx.eval(arrays)
        t4 = time.perf_counter()
        if kind == "prefill":
            session.scheduler.complete_prefill(plan)
        else:
            session.backend.finish_decode()
            session.scheduler.complete_decode(plan, arrays[0].tolist())
        self.steps[kind].append({"build_ms": (t1 - t0) * 1e3, "build_cpu_ms": (c1 - c0) * 1e3,
                                 "dispatch_ms": (t3 - t2) * 1e3, "host_ms": (t1 - t0 + t3 - t2) * 1e3,
                                 "wait_ms": (t4 - t3) * 1e3,
                                 "ops": sum(ops.values()) if ops is not None else None,
                                 "primitives": dict(ops) if ops is not None else None})
        return True

    def _build_prefill(self, plan) -> list:
        from app.workloads.engine import _cache_state, _prefill_inputs

        session = self.session
        caches = session.backend.prefill_caches(plan.seqs, plan.start, plan.num_tokens)
        inputs = _prefill_inputs(plan)
        model = session.loaded.model
        out = model(inputs, cache=caches) if self.engine == "mlx_lm" else model.model(inputs, cache=caches)
        return [*_cache_state(caches), out] if self.engine != "mlx_lm" else _cache_state(caches)

    def _build_decode(self, plan) -> list:
        import mlx.core as mx

        from app.workloads.engine import _cache_state

        session = self.session
        inputs = mx.array([[s.tokens[s.num_cached]] for s in plan.seqs])
        caches = session.backend.decode_caches(plan.seqs)
        logits = session.loaded.model(inputs, cache=caches)[:, -1, :]
        sampled = session.engine.sampler(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
        return [sampled, logits, *_cache_state(caches)]


def run_host_bench(config: HostConfig, progress=None) -> dict:
    """Every engine's steps, interleaved; per engine and kind of step the median and range of each phase."""
    import mlx.core as mx

    from app.models import load_model
    from app.workloads.scenarios import load_scenario

    say = progress or (lambda text: None)
    scenario = load_scenario(config.scenario, config.overrides)
    loaded = load_model(config.model, dtype=config.dtype, device=config.device, seed=config.seed)
    if config.emulate_cuda:
        from app.bench.host_emulation import install

        install(loaded.dtype, loaded.head_dim)
    runners = [EngineSteps(engine, config, loaded, scenario) for engine in config.engines]
    active, index = list(runners), 0
    while active:
        shift = index % len(active)
        for runner in active[shift:] + active[:shift]:
            if not runner.step():
                active.remove(runner)
        index += 1
        if index % 16 == 0:
            say(f"step {index}")
    return {"device": str(mx.default_device()), "mlx": mx.__version__, "model": loaded.name,
            "num_layers": loaded.num_layers, "config": {**config.__dict__, "engines": list(config.engines)},
            "machine_note": os.environ.get("SLABSCOPE_BENCH_NOTE", ""),
            "engines": {r.engine: {kind: {"stats": summarize(steps), "steps": steps}
                                   for kind, steps in r.steps.items()} for r in runners}}


def summarize(steps: list[dict]) -> dict:
    """{phase: {"median", "min", "max", "n"}} over ``steps``; the primitives of the median-ops step."""
    out = spread_by_field(steps, PHASES)
    counted = sorted((s for s in steps if s.get("primitives")), key=lambda s: s["ops"])
    if counted:
        out["primitives"] = counted[len(counted) // 2]["primitives"]
    return out


def format_report(result: dict) -> str:
    """One table per kind of step (median [min-max]), then the primitives slab adds over dense per layer."""
    config, layers = result["config"], result["num_layers"]
    lines = [f"bench host: {config['scenario']} {config['overrides']} on {result['model']} ({result['device']}, "
             f"MLX {result['mlx']}); every step built, dispatched and awaited in sequence, engines interleaved"]
    if config.get("emulate_cuda"):
        lines.append("EMULATED CUDA fused route (kernels replaced by zeros): only the build columns mean what they "
                     "mean on a GPU")
    for kind in ("prefill", "decode"):
        rows = {e: data[kind]["stats"] for e, data in result["engines"].items() if data[kind]["steps"]}
        if not rows:
            continue
        count = next(iter(rows.values()))["build_ms"]["n"]
        lines += ["", f"{kind} ({count} steps per engine; ms, median [min-max]; ops per step and per layer)",
                  f"{'engine':<11}" + "".join(f"{name:>26}" for name in HEADINGS) + f"{'ops':>16}"]
        for engine, stats in rows.items():
            cells = [_cell(stats.get(p)) for p in ("build_ms", "build_cpu_ms", "dispatch_ms", "host_ms", "wait_ms")]
            ops = stats.get("ops")
            lines.append(f"{engine:<11}" + "".join(f"{c:>26}" for c in cells)
                         + (f"{ops['median']:>10.0f} ({ops['median'] / layers:.0f})" if ops else f"{'-':>16}"))
        extra = _extra_primitives(rows, layers)
        if extra:
            lines.append(f"  per layer, slab over dense: {extra}")
    return "\n".join(lines)


def _cell(stat: dict | None) -> str:
    if stat is None:
        return "-"
    return f"{stat['median']:.2f} [{stat['min']:.2f}-{stat['max']:.2f}]"


def _extra_primitives(rows: dict, layers: int) -> str:
    """Primitives per layer the slab step has beyond the dense one (median-ops steps)."""
    slab, dense = rows.get("slab", {}).get("primitives"), rows.get("dense", {}).get("primitives")
    if not slab or not dense:
        return ""
    delta = {name: (slab.get(name, 0) - dense.get(name, 0)) / layers for name in set(slab) | set(dense)}
    shown = sorted(((n, d) for n, d in delta.items() if abs(d) >= 0.5), key=lambda item: -abs(item[1]))
    return ", ".join(f"{name} {d:+.1f}" for name, d in shown)
