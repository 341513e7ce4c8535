"""Workload scenarios: TOML files under ``assets/scenarios/``, selectable by name, parameters overridable.

A scenario file has a ``description``, a ``[params]`` table (the knobs ``--set k=v`` overrides), an optional
``[pool]`` table (suggested ``block_size``/``slab_blocks``/``prefill_chunk``; command-line flags win) and a list
of ``[[phases]]`` run one after the other, each marked by start/end events:

- ``kind = "idle"``: nothing runs for ``seconds``;
- ``kind = "requests"``: ``count`` requests with ``prompt_tokens`` and ``gen_tokens`` (an int or ``[min, max]``,
  drawn per request from the run's seed), at most ``concurrency`` in flight (new ones are admitted as others
  finish); ``shared_prefix`` tokens of one common system prompt precede each prompt;
- ``kind = "conversation"``: one conversation of ``turns`` turns; each turn's prompt is the whole conversation so
  far plus ``prompt_tokens`` new user tokens, and each turn resumes from the previous turn's kept K/V
  (``app.workloads.conversations``).

Phase values may name a parameter as ``"$name"``. Every value is checked where it is read: counts are whole numbers
(``1.5``, ``true`` and ``1e12`` are refused, never truncated) within the named bounds of ``app.workloads.limits``,
so a scenario that would run for days or exhaust memory is one ``ScenarioError``/``WorkloadLimitError`` line before
any work starts. Pure Python (tomllib): the TUI lists scenarios without mlx.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from app.workloads.limits import (MAX_CONCURRENCY, MAX_PHASE_REQUESTS, MAX_PHASES, MAX_REQUEST_TOKENS, ScenarioError,
                                  check_count, check_phase_prompt_tokens, check_seconds)

__all__ = ["DEFAULT_SCENARIO", "PHASE_KINDS", "Phase", "Scenario", "ScenarioError", "list_scenarios", "load_scenario",
           "parse_overrides"]

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "assets" / "scenarios"
DEFAULT_SCENARIO = "churn"
PHASE_KINDS = ("idle", "requests", "conversation")
PHASE_KEYS = {"idle": {"name", "kind", "seconds"},
              "requests": {"name", "kind", "count", "concurrency", "prompt_tokens", "gen_tokens", "shared_prefix"},
              "conversation": {"name", "kind", "turns", "concurrency", "prompt_tokens", "gen_tokens"}}


@dataclass(frozen=True)
class Phase:
    name: str
    kind: str
    seconds: float = 0.0
    count: int = 0
    concurrency: int = 1
    prompt_tokens: tuple[int, int] = (0, 0)
    gen_tokens: tuple[int, int] = (1, 1)
    shared_prefix: int = 0
    turns: int = 0


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    params: dict
    pool: dict
    phases: tuple[Phase, ...] = field(default_factory=tuple)

    @property
    def num_requests(self) -> int:
        return sum(p.count if p.kind == "requests" else p.turns for p in self.phases)


def list_scenarios(directory: Path = SCENARIO_DIR) -> list[tuple[str, str]]:
    """(name, description) of every scenario file, sorted by name."""
    out = []
    for path in sorted(directory.glob("*.toml")):
        with path.open("rb") as fh:
            out.append((path.stem, str(tomllib.load(fh).get("description", ""))))
    return out


def parse_overrides(items: list[str] | None) -> dict:
    """``["n=4", "gen_tokens=8"]`` -> ``{"n": 4, ...}``; values parsed as TOML scalars (ints, floats, strings)."""
    out = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ScenarioError(f"--set expects key=value, got {item!r}")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        out[key.strip()] = value
    return out


def load_scenario(name: str, overrides: dict | None = None, directory: Path = SCENARIO_DIR) -> Scenario:
    """Read ``<directory>/<name>.toml`` (or ``name`` itself if it is a path ending in .toml), apply ``overrides`` to its params and resolve its phases."""
    if not isinstance(name, str) or not name:
        raise ScenarioError(f"unknown scenario {name!r} (known: {_known(directory)})")
    path = Path(name) if name.endswith(".toml") else directory / f"{name}.toml"
    if (not name.endswith(".toml") and "/" in name) or not path.is_file():
        raise ScenarioError(f"unknown scenario {name!r} (known: {_known(directory)})")
    data = _read_toml(path, name)
    params = _table(data, "params", name)
    for key, value in (overrides or {}).items():
        if key not in params:
            raise ScenarioError(f"scenario {name!r} has no parameter {key!r} (has: {', '.join(params)})")
        params[key] = value
    raw_phases = data.get("phases", [])
    if not isinstance(raw_phases, list) or not all(isinstance(raw, dict) for raw in raw_phases):
        raise ScenarioError(f"scenario {name!r}: phases must be [[phases]] tables")
    if len(raw_phases) > MAX_PHASES:
        raise ScenarioError(f"scenario {name!r}: {len(raw_phases):,} phases exceed the limit {MAX_PHASES:,}")
    phases = tuple(_phase(name, raw, params) for raw in raw_phases)
    if not phases:
        raise ScenarioError(f"scenario {name!r} defines no phases")
    return Scenario(path.stem, str(data.get("description", "")), params, _table(data, "pool", name), phases)


def _known(directory: Path) -> str:
    return ", ".join(n for n, _ in list_scenarios(directory))


def _read_toml(path: Path, name: str) -> dict:
    """The file's TOML table; a file that cannot be read or parsed is one ScenarioError line."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"scenario {name!r} is not a readable TOML file: {exc}") from None


def _table(data: dict, key: str, name: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ScenarioError(f"scenario {name!r}: [{key}] must be a table, got {value!r}")
    return dict(value)


def _resolve(value, params: dict, where: str):
    if isinstance(value, str) and value.startswith("$"):
        if value[1:] not in params:
            raise ScenarioError(f"{where}: unknown parameter {value}")
        return params[value[1:]]
    if isinstance(value, list):
        return [_resolve(v, params, where) for v in value]
    return value


def _int_range(value, where: str, name: str) -> tuple[int, int]:
    """A token count: an int or a [min, max] pair of ints, each in [1, MAX_REQUEST_TOKENS], min <= max."""
    if isinstance(value, list):
        if len(value) != 2:
            raise ScenarioError(f"{where}: {name} must be an int or [min, max], got {value!r}")
        lo, hi = (check_count(v, name, where, 1, MAX_REQUEST_TOKENS) for v in value)
        if hi < lo:
            raise ScenarioError(f"{where}: {name} [min, max] has min > max: {value!r}")
        return lo, hi
    count = check_count(value, name, where, 1, MAX_REQUEST_TOKENS)
    return count, count


def _phase(scenario: str, raw: dict, params: dict) -> Phase:
    name = raw.get("name", "")
    where = f"scenario {scenario!r} phase {name!r}"
    kind = raw.get("kind", "requests")
    if kind not in PHASE_KINDS or not isinstance(name, str) or not name:
        raise ScenarioError(f"{where}: needs a name and kind in {PHASE_KINDS}")
    unknown = sorted(set(raw) - PHASE_KEYS[kind] - {"description"})
    if unknown:
        raise ScenarioError(f"{where}: unknown key(s) {', '.join(unknown)} for a {kind} phase "
                            f"(known: {', '.join(sorted(PHASE_KEYS[kind]))})")
    get = {k: _resolve(v, params, where) for k, v in raw.items()}
    if kind == "idle":
        return Phase(name, kind, seconds=check_seconds(get.get("seconds", 0), where))
    concurrency = check_count(get.get("concurrency", 1), "concurrency", where, 1, MAX_CONCURRENCY)
    prompt = _int_range(get.get("prompt_tokens", 1), where, "prompt_tokens")
    gen = _int_range(get.get("gen_tokens", 1), where, "gen_tokens")
    if kind == "conversation":
        turns = check_count(get.get("turns"), "turns", where, 1, MAX_PHASE_REQUESTS)
        return Phase(name, kind, turns=turns, concurrency=concurrency, prompt_tokens=prompt, gen_tokens=gen)
    count = check_count(get.get("count"), "count", where, 1, MAX_PHASE_REQUESTS)
    shared = check_count(get.get("shared_prefix", 0), "shared_prefix", where, 0, MAX_REQUEST_TOKENS)
    check_phase_prompt_tokens(count, shared, prompt[1], where)
    return Phase(name, kind, count=count, concurrency=concurrency, shared_prefix=shared, prompt_tokens=prompt,
                 gen_tokens=gen)
