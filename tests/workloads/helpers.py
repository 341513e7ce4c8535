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
    """Every decode step: same sequence ids, byte-identical logits (mx.array_equal). For computations that are the
    same ops on the same shapes (slab, monolithic and dense under one schedule): equal on every BLAS kernel."""
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


# Two computations of the same logits that differ only in the order of their roundings may differ by this many
# units of eps(dtype) * magnitude (see ``reorder_tolerance``).
REORDER_EPS = 64


def reorder_tolerance(reference) -> float:
    """The largest ``|other - reference|`` accepted when ``other`` computes the same quantity as ``reference`` with
    the same math in another order or blocking (a fused kernel's online softmax against SDPA; a padded batch
    against unpadded sequences): ``REORDER_EPS * eps(dtype) * max(1, max|reference|)``, dtype = reference's.

    Why this form: every floating-point operation errs by at most eps/2 of its result, so two orders of the same
    sums differ by a small multiple of eps times the magnitudes carried; logits and log-probabilities here are
    O(1-10) and the softmax normaliser (logsumexp) carries the error of the largest logit to every entry, hence
    the bound relative to max|reference| (never below 1). eps is the dtype's (float32: 2^-23 on CPU; bfloat16 2^-7,
    float16 2^-10), so the bound follows the precision computed in. REORDER_EPS = 64: the largest difference
    measured over the tests that use it, under OpenBLAS's Prescott, Haswell, SkylakeX and Cooperlake kernels and
    MLX's reference BLAS, is 14.3 eps * magnitude (smollm2 against mlx-lm's padded batch; docs/testing.md,
    "Numerics"), so 64 leaves a margin of 4; the bugs they guard (a wrong slab, row or offset, a missing mask or
    length) move values by 0.1 or more, thousands of times this bound."""
    import mlx.core as mx

    magnitude = max(1.0, mx.abs(reference).max().item())
    return REORDER_EPS * mx.finfo(reference.dtype).eps * magnitude


def assert_within_reorder_tolerance(other, reference, label: str) -> float:
    """``other`` equals ``reference`` in shape and within ``reorder_tolerance(reference)``; returns the largest
    difference in units of eps * max(1, max|reference|) (the figure docs/testing.md reports)."""
    import mlx.core as mx

    assert other.shape == reference.shape, f"{label}: shapes differ {other.shape} vs {reference.shape}"
    diff = mx.abs(other.astype(mx.float32) - reference.astype(mx.float32)).max().item()
    bound = reorder_tolerance(reference)
    assert diff <= bound, f"{label}: max abs diff {diff:.3g} above the reorder tolerance {bound:.3g}"
    units = diff / (bound / REORDER_EPS)
    _report(label, units)
    return units


def _report(label: str, units: float) -> None:
    """With SLABSCOPE_NUMERICS_REPORT=path: append the test, the comparison and its difference in eps * magnitude
    units as a JSON line (``lab/numerics_by_blas.sh`` runs the numerics tests under every BLAS and summarises)."""
    import json
    import os

    path = os.environ.get("SLABSCOPE_NUMERICS_REPORT")
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        with open(path, "a") as f:
            f.write(json.dumps({"test": test, "label": label, "eps_units": units}) + "\n")


def assert_close_logits(a: list, b: list, label: str) -> float:
    """Every decode step of two runs whose arithmetic legitimately differs (``a``: the fused route, ``b``: the
    gather route): the same sequence ids, the same greedy token per sequence (argmax), logits within
    ``reorder_tolerance`` of ``b``'s. Returns the largest difference in eps * magnitude units over the steps."""
    import mlx.core as mx

    assert len(a) == len(b), f"{label}: {len(a)} vs {len(b)} decode steps"
    worst = 0.0
    for step, ((ids_a, la), (ids_b, lb)) in enumerate(zip(a, b)):
        assert ids_a == ids_b, f"{label}: step {step} batches differ {ids_a} vs {ids_b}"
        assert mx.argmax(la, axis=-1).tolist() == mx.argmax(lb, axis=-1).tolist(), \
            f"{label}: greedy tokens differ at decode step {step}"
        worst = max(worst, assert_within_reorder_tolerance(la, lb, f"{label}, decode step {step}"))
    return worst


def stubborn_worker(spec, out_queue, stop_event, log_path, parent_pid=None) -> None:
    """A worker process stuck in a step (never looks at its stop event): says it started, then blocks. What
    ``WorkerHandle.cancel``'s terminate fallback is for; same signature as ``app.workloads.worker._worker_main``."""
    import threading

    from probes.events import LogLine
    from probes.transport import BatchSender

    BatchSender(out_queue).send([LogLine(t=1.0, text="stuck")])
    threading.Event().wait()
