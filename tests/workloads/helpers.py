"""Shared helpers for the workload tests (scenario files, runs on every backend, logits capture)."""

from __future__ import annotations

from pathlib import Path

BACKENDS = ("slab", "monolithic", "dense")
_LOADED: dict = {}


def load(name: str):
    """A model loaded once per test session (fp32 on CPU)."""
    from app.models import load_model

    if name not in _LOADED:
        _LOADED[name] = load_model(name, dtype="float32", device="cpu")
    return _LOADED[name]


def write_scenario(directory: Path, text: str, name: str = "t") -> str:
    """Write a scenario file and return its path (``RunSpec.scenario`` accepts a .toml path)."""
    path = Path(directory) / f"{name}.toml"
    path.write_text('description = "test scenario"\n' + text)
    return str(path)


def burst_toml(*, n: int = 3, concurrency: int = 3, prompt_tokens: str = "[10, 40]", gen_tokens: str = "4") -> str:
    """A one-phase scenario: ``n`` requests, ``concurrency`` in flight, token counts as TOML values (int or
    [min, max])."""
    return (f'[params]\nn = {n}\n[[phases]]\nname = "burst"\nkind = "requests"\ncount = "$n"\n'
            f"concurrency = {concurrency}\nprompt_tokens = {prompt_tokens}\ngen_tokens = {gen_tokens}\n")


def run_backend(loaded, scenario: str, backend: str, *, check: bool = True, kernel_route=None, **spec_fields):
    """Run ``scenario`` on ``backend``; returns (summary, events, [(seq_ids, logits)] per decode step)."""
    from app.workloads.runner import run_workload
    from app.workloads.spec import RunSpec

    events, logits = [], []
    spec = RunSpec(scenario=scenario, backend=backend, model=loaded.name, **spec_fields)
    summary = run_workload(spec, events.append, loaded=loaded, check_integrity=check, kernel_route=kernel_route,
                           logits_hook=lambda ids, lg: logits.append((list(ids), lg)))
    return summary, events, logits


def assert_same_logits(a: list, b: list, label: str) -> None:
    """Every decode step: same sequence ids, byte-identical logits (mx.array_equal)."""
    import mlx.core as mx

    assert len(a) == len(b), f"{label}: {len(a)} vs {len(b)} decode steps"
    for step, ((ids_a, la), (ids_b, lb)) in enumerate(zip(a, b)):
        assert ids_a == ids_b, f"{label}: step {step} batches differ {ids_a} vs {ids_b}"
        assert la.shape == lb.shape, f"{label}: step {step} shapes differ"
        if not mx.array_equal(la, lb):
            diff = mx.abs(la - lb).max().item()
            raise AssertionError(f"{label}: logits differ at decode step {step} (max abs diff {diff})")


class CacheSpy:
    """Wraps a model (and its trunk, ``model.model``, which prefill runs alone): records the type of every cache
    object the engine hands it in ``seen``, then calls through. Everything else is the wrapped model's."""

    def __init__(self, model, seen: set) -> None:
        self._model = model
        self.seen = seen
        trunk = getattr(model, "model", None)
        self.model = CacheSpy(trunk, seen) if trunk is not None else None

    def __call__(self, inputs, cache=None, **kwargs):
        self.seen.update(type(c) for c in cache or ())
        return self._model(inputs, cache=cache, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


def spied(loaded, seen: set):
    """``loaded`` with its model wrapped in a :class:`CacheSpy` recording into ``seen``."""
    import dataclasses

    return dataclasses.replace(loaded, model=CacheSpy(loaded.model, seen))


def stubborn_worker(spec, out_queue, stop_event, log_path, parent_pid=None) -> None:
    """A worker process stuck in a step (never looks at its stop event): says it started, then blocks. What
    ``WorkerHandle.cancel``'s terminate fallback is for; same signature as ``app.workloads.worker._worker_main``."""
    import threading

    from probes.events import LogLine
    from probes.transport import BatchSender

    BatchSender(out_queue).send([LogLine(t=1.0, text="stuck")])
    threading.Event().wait()
