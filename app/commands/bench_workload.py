"""The command-line side of an engine bench's workload (``app.bench.workload``): the same flags and the same checks
for ``bench throughput`` and ``bench host``."""

from __future__ import annotations


def add_workload_arguments(p, engines: tuple, default_engines: tuple) -> None:
    """--scenario, --set, --model, --dtype, --device and --engines (a subset of ``engines``)."""
    p.add_argument("--scenario", default="distinct_burst")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="scenario overrides")
    p.add_argument("--model", default="synthetic:qwen3-0.6b")
    p.add_argument("--dtype", default=None)
    p.add_argument("--device", choices=("cpu", "gpu"), default=None)
    p.add_argument("--engines", default=",".join(default_engines),
                   help=f"comma-separated subset of {','.join(engines)} (default {','.join(default_engines)})")


def workload_fields(args) -> dict:
    """The workload's fields from parsed flags, the scenario and its overrides checked (``ScenarioError``, a
    ValueError, in one line); nothing runs."""
    from app.workloads.scenarios import load_scenario, parse_overrides

    overrides = parse_overrides(args.set)
    load_scenario(args.scenario, overrides)
    return {"scenario": args.scenario, "overrides": overrides, "model": args.model, "dtype": args.dtype,
            "device": args.device, "engines": tuple(e.strip() for e in args.engines.split(",") if e.strip())}
