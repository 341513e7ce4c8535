"""Live prefill/decode workloads on the paged KV pool (slab / monolithic) and on mlx-lm's dense caches.

Importing this package never imports mlx (the TUI process uses ``RunSpec``, ``WorkerHandle`` and the scenario
list); ``run_workload`` and the cache adapters import mlx when used.

    from app.workloads import RunSpec, WorkerHandle, run_workload, list_scenarios, load_scenario
    summary = run_workload(RunSpec(scenario="churn", backend="slab"), emit=print)
    handle = WorkerHandle(RunSpec(backend="dense")).start(); events = handle.poll()
"""

from app.workloads.scenarios import DEFAULT_SCENARIO, Scenario, ScenarioError, list_scenarios, load_scenario
from app.workloads.spec import BACKENDS, RunSpec
from app.workloads.worker import WorkerHandle


def run_workload(*args, **kwargs):
    """See :func:`app.workloads.runner.run_workload` (imported lazily: it imports mlx)."""
    from app.workloads.runner import run_workload as _run

    return _run(*args, **kwargs)


__all__ = ["BACKENDS", "DEFAULT_SCENARIO", "RunSpec", "Scenario", "ScenarioError", "WorkerHandle",
           "list_scenarios", "load_scenario", "run_workload"]
