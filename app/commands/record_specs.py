"""The runs ``slabscope record`` asks for, from its flags: one ``RunSpec`` per backend. Shared by ``record`` (one
process per backend) and ``record_ranks`` (``--ranks N``); imports nothing of theirs. Parser-free and mlx-free."""

from __future__ import annotations

import os


def run_specs(args, backends: list[str]):
    """One ``RunSpec`` per backend from ``record``'s parsed flags (a recording path in ``--out`` each), the scenario
    loaded and checked against the model's positions first; ScenarioError/ValueError (one line) before anything
    starts. Changes nothing."""
    from app.models.registry import max_positions
    from app.workloads.limits import check_fits_context
    from app.workloads.scenarios import DEFAULT_SCENARIO, load_scenario, parse_overrides
    from app.workloads.spec import RunSpec

    scenario = args.scenario or DEFAULT_SCENARIO
    overrides = parse_overrides(args.set)
    loaded = load_scenario(scenario, overrides)  # validate before starting anything
    check_fits_context(loaded, max_positions(args.model), args.model)
    stem = os.path.splitext(os.path.basename(scenario))[0]
    return [RunSpec(scenario=scenario, backend=b, model=args.model, block_size=args.block_size,
                    slab_blocks=args.slab_blocks, sample_hz=args.sample_hz, snapshot_hz=args.snapshot_hz,
                    dtype=args.dtype, device=args.device, seed=args.seed, overrides=overrides,
                    record_path=os.path.join(args.out, f"{stem}-{b}.slabrec"),
                    blas_threads=1 if args.together else None, cache_limit=args.cache_limit,
                    prefill_trim=args.prefill_trim,
                    prefill_inflight=args.prefill_inflight, shrink=args.shrink, shrink_budget=args.shrink_budget,
                    open_blocks=args.open_blocks)
            for b in backends]
