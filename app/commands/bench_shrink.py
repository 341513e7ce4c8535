"""``slabscope bench shrink``: footprint after a burst per shrink policy (fresh processes, interleaved rounds) and
the decode-throughput cost of a policy against off (``app/bench/shrink.py`` says how each figure is measured).

    slabscope bench shrink                                  # burst_then_idle (CPU, default model) and churn
    slabscope bench shrink --part recovery --rounds 5 --json
    slabscope bench shrink --part cost --throughput-policy compact
"""

from __future__ import annotations

import json
import sys

from app.commands.arg_types import byte_size, finite_float, positive_int

RECOVERY_KEYS = ("max_ratio_within", "max_ratio_after_within", "first_at_or_below_target_s",
                 "stays_at_or_below_target_from_s", "blocks_moved", "bytes_moved", "bytes_moved_model", "move_s",
                 "slabs_released", "bytes_released", "trimmed_bytes", "trim_s", "reclaimed_bytes", "shrink_points_s")
COST_KEYS = ("decode_tok_s", "shrink_share_of_decode", "shrink_points_s", "blocks_moved", "bytes_moved", "move_s",
             "slabs_released")


def add_arguments(p) -> None:
    p.add_argument("--part", choices=("recovery", "cost", "both"), default="both",
                   help="recovery: footprint after the burst per policy; cost: decode tok/s against off")
    p.add_argument("--scenario", default="burst_then_idle", help="recovery scenario (needs a phase named burst)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="recovery scenario overrides")
    p.add_argument("--throughput-scenario", default="churn")
    p.add_argument("--throughput-set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--policies", default="off,release,compact", help="recovery policies (comma list)")
    p.add_argument("--throughput-policy", choices=("release", "compact"), default="compact")
    p.add_argument("--backend", choices=("slab", "monolithic"), default="slab")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--dtype", default=None)
    p.add_argument("--device", choices=("cpu", "gpu"), default=None)
    p.add_argument("--rounds", type=positive_int, default=5, help="interleaved rounds (>= 5 for a verdict)")
    p.add_argument("--fresh-rounds", type=int, default=1, help="fresh-process throughput runs per policy")
    p.add_argument("--shrink-budget", type=byte_size, default=None, metavar="BYTES")
    p.add_argument("--target", type=finite_float(0.0, above=True), default=1.10,
                   help="footprint / (weights + live KV) the recovery must reach (default 1.10)")
    p.add_argument("--within", type=finite_float(0.0), default=2.0, help="seconds after the burst (default 2)")
    p.add_argument("--sample-hz", type=finite_float(0.0, 1000.0, above=True), default=20.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object (progress on stderr)")


def main(args) -> int:
    from app.bench.shrink import (ShrinkBenchConfig, fresh_throughput, recovery_rounds, throughput_rounds,
                                  throughput_verdict)
    from app.bench.throughput import summarize
    from app.workloads.scenarios import ScenarioError, load_scenario, parse_overrides

    try:
        overrides, throughput_overrides = parse_overrides(args.set), parse_overrides(args.throughput_set)
        load_scenario(args.scenario, overrides)
        load_scenario(args.throughput_scenario, throughput_overrides)
        config = ShrinkBenchConfig(
            scenario=args.scenario, overrides=overrides, backend=args.backend, model=args.model, dtype=args.dtype,
            device=args.device, policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
            rounds=args.rounds, shrink_budget=args.shrink_budget, target=args.target, within_s=args.within,
            sample_hz=args.sample_hz, throughput_scenario=args.throughput_scenario,
            throughput_overrides=throughput_overrides, throughput_policy=args.throughput_policy,
            fresh_rounds=args.fresh_rounds, seed=args.seed)
    except (ScenarioError, ValueError) as exc:
        print(f"slabscope bench shrink: {exc}", file=sys.stderr)
        return 2
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    result: dict = {"config": {**config.__dict__, "policies": list(config.policies)}}
    if args.part in ("recovery", "both"):
        runs = recovery_rounds(config, say)
        result["recovery"] = {"runs": runs, "stats": {p: summarize(r, RECOVERY_KEYS) for p, r in runs.items()}}
    if args.part in ("cost", "both"):
        warmup, runs = throughput_rounds(config, say)
        fresh = fresh_throughput(config, say) if config.fresh_rounds else {}
        warm_stats = {p: summarize(r, COST_KEYS) for p, r in runs.items()}
        fresh_stats = {p: summarize(r, COST_KEYS) for p, r in fresh.items()}
        result["cost"] = {"warmup": warmup, "runs": runs, "fresh": fresh, "stats": warm_stats,
                          "fresh_stats": fresh_stats,
                          "verdict": throughput_verdict(warm_stats["off"], warm_stats[config.throughput_policy],
                                                        config.throughput_policy),
                          "fresh_verdict": throughput_verdict(fresh_stats.get("off", {}),
                                                              fresh_stats.get(config.throughput_policy, {}),
                                                              config.throughput_policy)}
    print(json.dumps(result, default=str) if args.json else format_report(result))
    return 0


def _cell(s: dict | None, scale: float = 1.0, fmt: str = ".3f") -> str:
    if not s:
        return "-"
    return (f"{format(s['median'] * scale, fmt)} [{format(s['min'] * scale, fmt)}-"
            f"{format(s['max'] * scale, fmt)}]")


def format_report(result: dict) -> str:
    config = result["config"]
    lines = [f"bench shrink on {config['backend']} / {config['model']} (median [min-max] over {config['rounds']} "
             "interleaved rounds; a shared machine)"]
    recovery = result.get("recovery")
    if recovery:
        lines += ["", f"recovery: {config['scenario']} {config['overrides']}, footprint / (weights + live KV) after "
                  f"the burst, target <= {config['target']:g} within {config['within_s']:g} s (fresh process per run)",
                  f"{'policy':<8} {'worst in first ' + format(config['within_s'], 'g') + ' s':>22} "
                  f"{'worst from ' + format(config['within_s'], 'g') + ' s':>22} "
                  f"{'stays <= target from s':>24} {'moved MiB (measured)':>24} {'moves ms':>20} "
                  f"{'released MiB':>22} {'trimmed MiB':>22}"]
        for policy, s in recovery["stats"].items():
            lines.append(f"{policy:<8} {_cell(s.get('max_ratio_within')):>22} "
                         f"{_cell(s.get('max_ratio_after_within')):>22} "
                         f"{_cell(s.get('stays_at_or_below_target_from_s'), fmt='.2f'):>24} "
                         f"{_cell(s.get('bytes_moved'), 1 / 2**20, '.2f'):>24} "
                         f"{_cell(s.get('move_s'), 1e3, '.1f'):>20} "
                         f"{_cell(s.get('bytes_released'), 1 / 2**20, '.1f'):>22} "
                         f"{_cell(s.get('trimmed_bytes'), 1 / 2**20, '.1f'):>22}")
    cost = result.get("cost")
    if cost:
        lines += ["", f"cost: {config['throughput_scenario']} {config['throughput_overrides']}, decode tok/s and the "
                  "shrink points' share of decode wall time (measured in each run)"]
        for title, table in (("warm (one process)", cost["stats"]), ("fresh process", cost["fresh_stats"])):
            if not table:
                continue
            lines.append(f"{title}:")
            for policy, s in table.items():
                lines.append(f"  {policy:<8} decode tok/s {_cell(s.get('decode_tok_s'), fmt='.2f')}  shrink share "
                             f"% {_cell(s.get('shrink_share_of_decode'), 100, '.4f')}  blocks moved "
                             f"{_cell(s.get('blocks_moved'), fmt='.0f')}  move ms {_cell(s.get('move_s'), 1e3, '.1f')}")
        lines += [f"verdict (warm): {cost['verdict']}", f"verdict (fresh): {cost['fresh_verdict']}"]
    return "\n".join(lines)
